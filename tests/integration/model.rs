//! A model-based test through the real server: a seeded random sequence of list, hash, set
//! and sorted-set commands goes to hotkv and to a plain in-test model (VecDeque, BTreeMap,
//! BTreeSet), and every reply must match the model's exactly (unordered replies compared as
//! sorted). Keys and members come from small pools so commands collide: types clash
//! (WRONGTYPE), collections empty out (and must vanish) and grow past the compact-encoding
//! thresholds, which one run lowers so that every conversion is crossed many times.
//!
//! Nothing is timed: the sequence is a pure function of the seed, so a failure reproduces.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use hotkv_test_support::{Frame, RawClient};

use crate::server_with;

/// The commands and their expected replies.
mod ops;

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const KEYS: &[&str] = &["k0", "k1", "k2", "k3", "k4"];
const MEMBERS: &[&str] = &["a", "b", "c", "d", "e", "f", "1", "2", "30", "-4"];

/// SplitMix64: a tiny deterministic generator, so the sequence needs no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// An integer in `lo..=hi`.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len())]
    }
}

#[derive(Debug, Clone)]
enum Val {
    List(VecDeque<String>),
    Hash(BTreeMap<String, String>),
    Set(BTreeSet<String>),
    ZSet(BTreeMap<String, f64>),
}

impl Val {
    fn type_name(&self) -> &'static str {
        match self {
            Val::List(_) => "list",
            Val::Hash(_) => "hash",
            Val::Set(_) => "set",
            Val::ZSet(_) => "zset",
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Val::List(l) => l.is_empty(),
            Val::Hash(h) => h.is_empty(),
            Val::Set(s) => s.is_empty(),
            Val::ZSet(z) => z.is_empty(),
        }
    }
}

/// What a reply must be.
#[derive(Debug)]
enum Want {
    /// Exactly this frame.
    Exact(Frame),
    /// An array with these items in any order (SMEMBERS, SINTER).
    Unordered(Frame),
    /// A flat field/value array holding these pairs in any order (HGETALL).
    Pairs(Vec<(String, String)>),
}

fn int(n: usize) -> Want {
    Want::Exact(Frame::Integer(n as i64))
}

fn bulks<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> Frame {
    Frame::Array(items.into_iter().map(|s| Frame::bulk(s.as_ref())).collect())
}

fn err(text: &str) -> Want {
    Want::Exact(Frame::Error(text.into()))
}

/// A score as Valkey prints it: integral values without a fraction. The model only makes
/// halves and integers, whose shortest form Rust and Valkey agree on.
fn score_text(v: f64) -> String {
    if v.fract() == 0.0 { format!("{}", v as i64) } else { format!("{v}") }
}

/// A score argument: an integer or a half in -5..=5.
fn score_arg(rng: &mut Rng) -> String {
    let halves = rng.range(-10, 10);
    score_text(halves as f64 / 2.0)
}

/// Valkey's LRANGE/LTRIM index normalisation: the inclusive range, or None when empty.
fn span(len: usize, start: i64, end: i64) -> Option<(usize, usize)> {
    let len = len as i64;
    let mut s = if start < 0 { len + start } else { start };
    let mut e = if end < 0 { len + end } else { end };
    if s < 0 {
        s = 0;
    }
    if s > e || s >= len {
        return None;
    }
    if e >= len {
        e = len - 1;
    }
    Some((s as usize, e as usize))
}

/// The sorted-set members in rank order.
fn ranked(z: &BTreeMap<String, f64>) -> Vec<(String, f64)> {
    let mut v: Vec<(String, f64)> = z.iter().map(|(m, s)| (m.clone(), *s)).collect();
    v.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    v
}

#[derive(Default)]
struct Model {
    keys: HashMap<String, Val>,
}

impl Model {
    /// The value at `key` if it has the type `ty`: Ok(None) when absent, Err when it is another type.
    fn get(&mut self, key: &str, ty: &str) -> Result<Option<&mut Val>, Want> {
        match self.keys.get_mut(key) {
            None => Ok(None),
            Some(v) if v.type_name() == ty => Ok(Some(v)),
            Some(_) => Err(err(WRONGTYPE)),
        }
    }

    /// Drops `key` if its collection became empty, as the server must.
    fn reap(&mut self, key: &str) {
        if self.keys.get(key).is_some_and(Val::is_empty) {
            self.keys.remove(key);
        }
    }

    fn list(&mut self, key: &str, create: bool) -> Result<Option<&mut VecDeque<String>>, Want> {
        if create && !self.keys.contains_key(key) {
            self.keys.insert(key.to_string(), Val::List(VecDeque::new()));
        }
        Ok(self.get(key, "list")?.map(|v| match v {
            Val::List(l) => l,
            _ => unreachable!("type checked"),
        }))
    }

    fn hash(&mut self, key: &str, create: bool) -> Result<Option<&mut BTreeMap<String, String>>, Want> {
        if create && !self.keys.contains_key(key) {
            self.keys.insert(key.to_string(), Val::Hash(BTreeMap::new()));
        }
        Ok(self.get(key, "hash")?.map(|v| match v {
            Val::Hash(h) => h,
            _ => unreachable!("type checked"),
        }))
    }

    fn set(&mut self, key: &str, create: bool) -> Result<Option<&mut BTreeSet<String>>, Want> {
        if create && !self.keys.contains_key(key) {
            self.keys.insert(key.to_string(), Val::Set(BTreeSet::new()));
        }
        Ok(self.get(key, "set")?.map(|v| match v {
            Val::Set(s) => s,
            _ => unreachable!("type checked"),
        }))
    }

    fn zset(&mut self, key: &str, create: bool) -> Result<Option<&mut BTreeMap<String, f64>>, Want> {
        if create && !self.keys.contains_key(key) {
            self.keys.insert(key.to_string(), Val::ZSet(BTreeMap::new()));
        }
        Ok(self.get(key, "zset")?.map(|v| match v {
            Val::ZSet(z) => z,
            _ => unreachable!("type checked"),
        }))
    }

    /// A creating command must not create a key of its type over a key of another type.
    fn check(&self, key: &str, ty: &str) -> Result<(), Want> {
        match self.keys.get(key) {
            Some(v) if v.type_name() != ty => Err(err(WRONGTYPE)),
            _ => Ok(()),
        }
    }
}

/// Picks one command, applies it to the model and returns its arguments and expected reply.
fn step(rng: &mut Rng, m: &mut Model) -> (Vec<String>, Want) {
    let key = rng.pick(KEYS).to_string();
    let mut argv: Vec<String> = Vec::new();
    let want = match rng.below(4) {
        0 => ops::list_op(rng, m, &key, &mut argv),
        1 => ops::hash_op(rng, m, &key, &mut argv),
        2 => ops::set_op(rng, m, &key, &mut argv),
        _ => ops::zset_op(rng, m, &key, &mut argv),
    };
    let want = want.unwrap_or_else(|e| e);
    m.reap(&key);
    for k in KEYS {
        m.reap(k);
    }
    (argv, want)
}

/// Sorts the items of an array reply (for SMEMBERS, HGETALL pairs, SINTER).
fn sorted(f: &Frame) -> Frame {
    match f {
        Frame::Array(items) => {
            let mut v = items.clone();
            v.sort_by_key(|x| format!("{x:?}"));
            Frame::Array(v)
        }
        other => other.clone(),
    }
}

/// Runs `steps` random commands from `seed` and checks every reply and, now and then, the
/// whole keyspace (EXISTS and TYPE of every key).
fn run(c: &mut RawClient, seed: u64, steps: usize) {
    let mut rng = Rng(seed);
    let mut m = Model::default();
    let mut history: VecDeque<String> = VecDeque::new();
    for i in 0..steps {
        let (argv, want) = step(&mut rng, &mut m);
        let got = c.cmd(&argv);
        history.push_back(argv.join(" "));
        if history.len() > 12 {
            history.pop_front();
        }
        let ok = match &want {
            Want::Exact(f) => got == *f,
            Want::Unordered(f) => sorted(&got) == sorted(f),
            Want::Pairs(want) => {
                matches!(got, Frame::Array(_)) && {
                    let mut pairs: Vec<(String, String)> =
                        got.pairs().iter().map(|(f, v)| (f.text(), v.text())).collect();
                    pairs.sort();
                    pairs == *want
                }
            }
        };
        assert!(
            ok,
            "seed {seed} step {i}: {:?}\n got  {got}\n want {want:?}\nlast commands:\n{}",
            argv,
            history.iter().cloned().collect::<Vec<_>>().join("\n")
        );
        if i % 25 == 0 {
            for k in KEYS {
                let ty = m.keys.get(*k).map_or("none", Val::type_name);
                assert_eq!(c.cmd(&["TYPE", k]), Frame::simple(ty), "seed {seed} step {i}: TYPE {k}");
            }
        }
    }
}

#[test]
fn random_commands_match_the_model_with_default_thresholds() {
    let srv = server_with(&[]);
    let mut c = srv.client();
    for seed in [1, 2] {
        c.cmd(&["FLUSHALL"]);
        run(&mut c, seed, 1500);
    }
}

#[test]
fn random_commands_match_the_model_across_encoding_conversions() {
    let srv = server_with(&[
        ("list-max-listpack-size", "2"),
        ("hash-max-listpack-entries", "3"),
        ("hash-max-listpack-value", "2"),
        ("set-max-intset-entries", "2"),
        ("set-max-listpack-entries", "3"),
        ("zset-max-listpack-entries", "3"),
        ("zset-max-listpack-value", "1"),
    ]);
    let mut c = srv.client();
    for seed in [3, 4, 5] {
        c.cmd(&["FLUSHALL"]);
        run(&mut c, seed, 1500);
    }
}
