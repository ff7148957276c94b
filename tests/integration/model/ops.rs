//! The model's commands, one function per family: each picks a command and its arguments,
//! writes them to `argv`, applies the command to the model and returns the reply Valkey
//! gives (`Err` carries an error reply, so `?` on a type check ends the command there).

use std::collections::BTreeSet;

use hotkv_test_support::Frame;

use super::{KEYS, MEMBERS, Model, Rng, Want, bulks, err, int, ranked, score_arg, score_text, span};

type Reply = Result<Want, Want>;

fn push_args(argv: &mut Vec<String>, args: &[&str]) {
    argv.extend(args.iter().map(|s| s.to_string()));
}

/// 1 to 3 random members.
fn some_members(rng: &mut Rng) -> Vec<String> {
    (0..rng.range(1, 3)).map(|_| rng.pick(MEMBERS).to_string()).collect()
}

pub(super) fn list_op(rng: &mut Rng, m: &mut Model, key: &str, argv: &mut Vec<String>) -> Reply {
    match rng.below(10) {
        0 | 1 => {
            let cmd = if rng.below(2) == 0 { "LPUSH" } else { "RPUSH" };
            let items = some_members(rng);
            push_args(argv, &[cmd, key]);
            argv.extend(items.iter().cloned());
            m.check(key, "list")?;
            let l = m.list(key, true)?.expect("created");
            for it in items {
                if cmd == "LPUSH" { l.push_front(it) } else { l.push_back(it) }
            }
            Ok(int(l.len()))
        }
        2 => {
            let left = rng.below(2) == 0;
            push_args(argv, &[if left { "LPOP" } else { "RPOP" }, key]);
            let count = (rng.below(2) == 0).then(|| rng.range(1, 3) as usize);
            if let Some(n) = count {
                argv.push(n.to_string());
            }
            let Some(l) = m.list(key, false)? else {
                return Ok(Want::Exact(if count.is_some() { Frame::NullArray } else { Frame::NullBulk }));
            };
            let mut popped = Vec::new();
            for _ in 0..count.unwrap_or(1) {
                if let Some(v) = if left { l.pop_front() } else { l.pop_back() } {
                    popped.push(v);
                }
            }
            Ok(Want::Exact(if count.is_some() { bulks(popped) } else { Frame::bulk(&popped[0]) }))
        }
        3 => {
            let (s, e) = (rng.range(-6, 6), rng.range(-6, 6));
            push_args(argv, &["LRANGE", key, &s.to_string(), &e.to_string()]);
            let items: Vec<String> = match m.list(key, false)? {
                Some(l) => span(l.len(), s, e).map_or(vec![], |(a, b)| l.range(a..=b).cloned().collect()),
                None => vec![],
            };
            Ok(Want::Exact(bulks(items)))
        }
        4 => {
            let i = rng.range(-5, 5);
            push_args(argv, &["LINDEX", key, &i.to_string()]);
            let Some(l) = m.list(key, false)? else { return Ok(Want::Exact(Frame::NullBulk)) };
            let at = if i < 0 { l.len() as i64 + i } else { i };
            Ok(Want::Exact(usize::try_from(at).ok().and_then(|a| l.get(a)).map_or(Frame::NullBulk, Frame::bulk)))
        }
        5 => {
            let (i, v) = (rng.range(-4, 4), rng.pick(MEMBERS));
            push_args(argv, &["LSET", key, &i.to_string(), v]);
            let Some(l) = m.list(key, false)? else { return Err(err("ERR no such key")) };
            let at = if i < 0 { l.len() as i64 + i } else { i };
            match usize::try_from(at).ok().and_then(|a| l.get_mut(a)) {
                Some(slot) => *slot = v.to_string(),
                None => return Err(err("ERR index out of range")),
            }
            Ok(Want::Exact(Frame::ok()))
        }
        6 => {
            let (n, v) = (rng.range(-2, 2), rng.pick(MEMBERS));
            push_args(argv, &["LREM", key, &n.to_string(), v]);
            let Some(l) = m.list(key, false)? else { return Ok(int(0)) };
            let limit = if n == 0 { usize::MAX } else { n.unsigned_abs() as usize };
            let mut removed = 0;
            if n >= 0 {
                let mut i = 0;
                while i < l.len() && removed < limit {
                    if l[i] == v {
                        l.remove(i);
                        removed += 1
                    } else {
                        i += 1
                    }
                }
            } else {
                let mut i = l.len();
                while i > 0 && removed < limit {
                    i -= 1;
                    if l[i] == v {
                        l.remove(i);
                        removed += 1;
                    }
                }
            }
            Ok(int(removed))
        }
        7 => {
            let (s, e) = (rng.range(-4, 4), rng.range(-4, 6));
            push_args(argv, &["LTRIM", key, &s.to_string(), &e.to_string()]);
            if let Some(l) = m.list(key, false)? {
                match span(l.len(), s, e) {
                    Some((a, b)) => {
                        l.truncate(b + 1);
                        l.drain(..a);
                    }
                    None => l.clear(),
                }
            }
            Ok(Want::Exact(Frame::ok()))
        }
        8 => {
            let (before, pivot, v) = (rng.below(2) == 0, rng.pick(MEMBERS), rng.pick(MEMBERS));
            push_args(argv, &["LINSERT", key, if before { "BEFORE" } else { "AFTER" }, pivot, v]);
            let Some(l) = m.list(key, false)? else { return Ok(int(0)) };
            let Some(at) = l.iter().position(|x| x == pivot) else { return Ok(Want::Exact(Frame::Integer(-1))) };
            l.insert(if before { at } else { at + 1 }, v.to_string());
            Ok(int(l.len()))
        }
        _ => {
            push_args(argv, &["LLEN", key]);
            Ok(int(m.list(key, false)?.map_or(0, |l| l.len())))
        }
    }
}

pub(super) fn hash_op(rng: &mut Rng, m: &mut Model, key: &str, argv: &mut Vec<String>) -> Reply {
    match rng.below(7) {
        0 | 1 => {
            push_args(argv, &["HSET", key]);
            let pairs: Vec<(String, String)> =
                (0..rng.range(1, 3)).map(|_| (rng.pick(MEMBERS).to_string(), rng.pick(MEMBERS).to_string())).collect();
            for (f, v) in &pairs {
                push_args(argv, &[f, v]);
            }
            m.check(key, "hash")?;
            let h = m.hash(key, true)?.expect("created");
            Ok(int(pairs.into_iter().filter(|(f, v)| h.insert(f.clone(), v.clone()).is_none()).count()))
        }
        2 => {
            let fields = some_members(rng);
            push_args(argv, &["HDEL", key]);
            argv.extend(fields.iter().cloned());
            let Some(h) = m.hash(key, false)? else { return Ok(int(0)) };
            Ok(int(fields.iter().filter(|f| h.remove(*f).is_some()).count()))
        }
        3 => {
            let f = rng.pick(MEMBERS);
            push_args(argv, &["HGET", key, f]);
            let v = m.hash(key, false)?.and_then(|h| h.get(f).cloned());
            Ok(Want::Exact(v.map_or(Frame::NullBulk, Frame::bulk)))
        }
        4 => {
            let (f, by) = (rng.pick(MEMBERS), rng.range(-3, 3));
            push_args(argv, &["HINCRBY", key, f, &by.to_string()]);
            m.check(key, "hash")?;
            let h = m.hash(key, true)?.expect("created");
            let old = match h.get(f) {
                None => 0,
                Some(v) => match v.parse::<i64>() {
                    Ok(n) => n,
                    Err(_) => return Err(err("ERR hash value is not an integer")),
                },
            };
            h.insert(f.to_string(), (old + by).to_string());
            Ok(Want::Exact(Frame::Integer(old + by)))
        }
        5 => {
            push_args(argv, &["HGETALL", key]);
            let flat: Vec<String> = match m.hash(key, false)? {
                Some(h) => h.iter().flat_map(|(f, v)| [f.clone(), v.clone()]).collect(),
                None => vec![],
            };
            Ok(Want::Pairs(flat.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect()))
        }
        _ => {
            push_args(argv, &["HLEN", key]);
            Ok(int(m.hash(key, false)?.map_or(0, |h| h.len())))
        }
    }
}

pub(super) fn set_op(rng: &mut Rng, m: &mut Model, key: &str, argv: &mut Vec<String>) -> Reply {
    match rng.below(7) {
        0 | 1 => {
            let members = some_members(rng);
            push_args(argv, &["SADD", key]);
            argv.extend(members.iter().cloned());
            m.check(key, "set")?;
            let s = m.set(key, true)?.expect("created");
            Ok(int(members.into_iter().filter(|x| s.insert(x.clone())).count()))
        }
        2 => {
            let members = some_members(rng);
            push_args(argv, &["SREM", key]);
            argv.extend(members.iter().cloned());
            let Some(s) = m.set(key, false)? else { return Ok(int(0)) };
            Ok(int(members.iter().filter(|x| s.remove(*x)).count()))
        }
        3 => {
            let x = rng.pick(MEMBERS);
            push_args(argv, &["SISMEMBER", key, x]);
            Ok(int(usize::from(m.set(key, false)?.is_some_and(|s| s.contains(x)))))
        }
        4 => {
            push_args(argv, &["SMEMBERS", key]);
            let all: Vec<String> = m.set(key, false)?.map_or(vec![], |s| s.iter().cloned().collect());
            Ok(Want::Unordered(bulks(all)))
        }
        5 => {
            let other = rng.pick(KEYS);
            push_args(argv, &["SINTER", key, other]);
            // Every key is type-checked before a missing one empties the result.
            let a = m.set(key, false)?.cloned();
            let b = m.set(other, false)?.cloned();
            let both: BTreeSet<String> = match (a, b) {
                (Some(a), Some(b)) => a.intersection(&b).cloned().collect(),
                _ => BTreeSet::new(),
            };
            Ok(Want::Unordered(bulks(both)))
        }
        _ => {
            let (dst, x) = (rng.pick(KEYS), rng.pick(MEMBERS));
            push_args(argv, &["SMOVE", key, dst, x]);
            // A missing source answers 0 before the destination's type is looked at.
            let Some(in_src) = m.set(key, false)?.map(|s| s.contains(x)) else { return Ok(int(0)) };
            m.check(dst, "set")?;
            match in_src {
                false => Ok(int(0)),
                true if dst == key => Ok(int(1)),
                true => {
                    m.set(key, false)?.expect("exists").remove(x);
                    m.set(dst, true)?.expect("created").insert(x.to_string());
                    Ok(int(1))
                }
            }
        }
    }
}

pub(super) fn zset_op(rng: &mut Rng, m: &mut Model, key: &str, argv: &mut Vec<String>) -> Reply {
    match rng.below(8) {
        0 | 1 => {
            push_args(argv, &["ZADD", key]);
            let pairs: Vec<(String, String)> =
                (0..rng.range(1, 3)).map(|_| (score_arg(rng), rng.pick(MEMBERS).to_string())).collect();
            for (s, x) in &pairs {
                push_args(argv, &[s, x]);
            }
            m.check(key, "zset")?;
            let z = m.zset(key, true)?.expect("created");
            Ok(int(pairs.into_iter().filter(|(s, x)| z.insert(x.clone(), s.parse().expect("score")).is_none()).count()))
        }
        2 => {
            let (by, x) = (score_arg(rng), rng.pick(MEMBERS));
            push_args(argv, &["ZINCRBY", key, &by, x]);
            m.check(key, "zset")?;
            let z = m.zset(key, true)?.expect("created");
            let s = z.entry(x.to_string()).or_insert(0.0);
            *s += by.parse::<f64>().expect("score");
            Ok(Want::Exact(Frame::bulk(score_text(*s))))
        }
        3 => {
            let members = some_members(rng);
            push_args(argv, &["ZREM", key]);
            argv.extend(members.iter().cloned());
            let Some(z) = m.zset(key, false)? else { return Ok(int(0)) };
            Ok(int(members.iter().filter(|x| z.remove(*x).is_some()).count()))
        }
        4 => {
            let x = rng.pick(MEMBERS);
            let rank = rng.below(2) == 0;
            push_args(argv, &[if rank { "ZRANK" } else { "ZSCORE" }, key, x]);
            let Some(z) = m.zset(key, false)? else { return Ok(Want::Exact(Frame::NullBulk)) };
            let reply = if rank {
                ranked(z).iter().position(|(y, _)| y == x).map_or(Frame::NullBulk, |i| Frame::Integer(i as i64))
            } else {
                z.get(x).map_or(Frame::NullBulk, |s| Frame::bulk(score_text(*s)))
            };
            Ok(Want::Exact(reply))
        }
        5 => {
            let (s, e, scores) = (rng.range(-5, 5), rng.range(-5, 5), rng.below(2) == 0);
            push_args(argv, &["ZRANGE", key, &s.to_string(), &e.to_string()]);
            if scores {
                argv.push("WITHSCORES".into());
            }
            let all = m.zset(key, false)?.map_or(vec![], |z| ranked(z));
            let picked = span(all.len(), s, e).map_or(&all[..0], |(a, b)| &all[a..=b]);
            let flat: Vec<String> = picked
                .iter()
                .flat_map(|(x, sc)| if scores { vec![x.clone(), score_text(*sc)] } else { vec![x.clone()] })
                .collect();
            Ok(Want::Exact(bulks(flat)))
        }
        6 => {
            let (lo, hi) = (rng.range(-5, 5), rng.range(-5, 5));
            push_args(argv, &["ZRANGEBYSCORE", key, &lo.to_string(), &hi.to_string()]);
            let all = m.zset(key, false)?.map_or(vec![], |z| ranked(z));
            let inside = all.into_iter().filter(|(_, s)| *s >= lo as f64 && *s <= hi as f64).map(|(x, _)| x);
            Ok(Want::Exact(bulks(inside.collect::<Vec<_>>())))
        }
        _ => {
            let n = rng.range(1, 3) as usize;
            push_args(argv, &["ZPOPMIN", key, &n.to_string()]);
            let Some(z) = m.zset(key, false)? else { return Ok(Want::Exact(Frame::Array(vec![]))) };
            let popped: Vec<(String, f64)> = ranked(z).into_iter().take(n).collect();
            let mut flat = Vec::new();
            for (x, s) in popped {
                z.remove(&x);
                flat.push(x);
                flat.push(score_text(s));
            }
            Ok(Want::Exact(bulks(flat)))
        }
    }
}
