//! Command metadata: one row per command (and per subcommand) holding everything dispatch,
//! `COMMAND INFO/DOCS/GETKEYS` and cluster routing need, plus the handler.
//!
//! Rows are `'static` data. The engine owns the rows of data commands; the server crate
//! owns the rows of the commands it implements (CONFIG, INFO, CLIENT, ...) with its own
//! handler type. Both use [`CommandSpec`], so every reader of metadata sees one shape.

use hotkv_protocol::Args;

/// Command flags, as `COMMAND INFO` names them.
pub mod flags {
    /// May modify the keyspace.
    pub const WRITE: u32 = 1 << 0;
    /// Never modifies the keyspace.
    pub const READONLY: u32 = 1 << 1;
    /// May grow memory: refused with OOM over `maxmemory`.
    pub const DENYOOM: u32 = 1 << 2;
    /// Administrative.
    pub const ADMIN: u32 = 1 << 4;
    /// Pub/sub related.
    pub const PUBSUB: u32 = 1 << 5;
    /// Not allowed in scripts.
    pub const NOSCRIPT: u32 = 1 << 6;
    /// May block the client.
    pub const BLOCKING: u32 = 1 << 7;
    /// Allowed while loading.
    pub const LOADING: u32 = 1 << 8;
    /// Allowed on a replica with stale data.
    pub const STALE: u32 = 1 << 9;
    /// Not shown to MONITOR.
    pub const SKIP_MONITOR: u32 = 1 << 10;
    /// Not recorded in the slow log.
    pub const SKIP_SLOWLOG: u32 = 1 << 11;
    /// Allowed on an importing slot after ASKING.
    pub const ASKING: u32 = 1 << 12;
    /// O(1) or O(log N).
    pub const FAST: u32 = 1 << 13;
    /// Allowed before authentication.
    pub const NO_AUTH: u32 = 1 << 14;
    /// May replicate even though it is not a write (hidden in COMMAND INFO).
    pub const MAY_REPLICATE: u32 = 1 << 15;
    /// Keys are optional.
    pub const NO_MANDATORY_KEYS: u32 = 1 << 17;
    /// Protected by `enable-*-command` (hidden in COMMAND INFO).
    pub const PROTECTED: u32 = 1 << 18;
    /// Refused during async loading.
    pub const NO_ASYNC_LOADING: u32 = 1 << 20;
    /// Not allowed inside MULTI.
    pub const NO_MULTI: u32 = 1 << 21;
    /// Key positions depend on the arguments (derived, never written in a row).
    pub const MOVABLE_KEYS: u32 = 1 << 22;
    /// Allowed while a script is busy.
    pub const ALLOW_BUSY: u32 = 1 << 23;
    /// May lazily expire keys it did not name (SCAN, RANDOMKEY), so its deletions must be
    /// propagated even from a read-only command (hidden in COMMAND INFO).
    pub const TOUCHES_ARBITRARY_KEYS: u32 = 1 << 24;

    /// Names in COMMAND INFO order; hidden flags are absent.
    pub const NAMES: &[(u32, &str)] = &[
        (WRITE, "write"),
        (READONLY, "readonly"),
        (DENYOOM, "denyoom"),
        (ADMIN, "admin"),
        (PUBSUB, "pubsub"),
        (NOSCRIPT, "noscript"),
        (BLOCKING, "blocking"),
        (LOADING, "loading"),
        (STALE, "stale"),
        (SKIP_MONITOR, "skip_monitor"),
        (SKIP_SLOWLOG, "skip_slowlog"),
        (ASKING, "asking"),
        (FAST, "fast"),
        (NO_AUTH, "no_auth"),
        (NO_MANDATORY_KEYS, "no_mandatory_keys"),
        (NO_ASYNC_LOADING, "no_async_loading"),
        (NO_MULTI, "no_multi"),
        (MOVABLE_KEYS, "movablekeys"),
        (ALLOW_BUSY, "allow_busy"),
    ];
}

/// ACL categories.
pub mod acl {
    #![allow(missing_docs)]
    pub const KEYSPACE: u32 = 1 << 0;
    pub const READ: u32 = 1 << 1;
    pub const WRITE: u32 = 1 << 2;
    pub const SET: u32 = 1 << 3;
    pub const SORTEDSET: u32 = 1 << 4;
    pub const LIST: u32 = 1 << 5;
    pub const HASH: u32 = 1 << 6;
    pub const STRING: u32 = 1 << 7;
    pub const BITMAP: u32 = 1 << 8;
    pub const HYPERLOGLOG: u32 = 1 << 9;
    pub const GEO: u32 = 1 << 10;
    pub const STREAM: u32 = 1 << 11;
    pub const PUBSUB: u32 = 1 << 12;
    pub const ADMIN: u32 = 1 << 13;
    pub const FAST: u32 = 1 << 14;
    pub const SLOW: u32 = 1 << 15;
    pub const BLOCKING: u32 = 1 << 16;
    pub const DANGEROUS: u32 = 1 << 17;
    pub const CONNECTION: u32 = 1 << 18;
    pub const TRANSACTION: u32 = 1 << 19;
    pub const SCRIPTING: u32 = 1 << 20;

    /// Names in Valkey's order (`ACL CAT`).
    pub const NAMES: &[(u32, &str)] = &[
        (KEYSPACE, "keyspace"),
        (READ, "read"),
        (WRITE, "write"),
        (SET, "set"),
        (SORTEDSET, "sortedset"),
        (LIST, "list"),
        (HASH, "hash"),
        (STRING, "string"),
        (BITMAP, "bitmap"),
        (HYPERLOGLOG, "hyperloglog"),
        (GEO, "geo"),
        (STREAM, "stream"),
        (PUBSUB, "pubsub"),
        (ADMIN, "admin"),
        (FAST, "fast"),
        (SLOW, "slow"),
        (BLOCKING, "blocking"),
        (DANGEROUS, "dangerous"),
        (CONNECTION, "connection"),
        (TRANSACTION, "transaction"),
        (SCRIPTING, "scripting"),
    ];
}

/// Key-spec flags (`COMMAND INFO` key_specs `flags`).
pub mod key_flags {
    #![allow(missing_docs)]
    pub const RO: u32 = 1 << 0;
    pub const RW: u32 = 1 << 1;
    pub const OW: u32 = 1 << 2;
    pub const RM: u32 = 1 << 3;
    pub const ACCESS: u32 = 1 << 4;
    pub const UPDATE: u32 = 1 << 5;
    pub const INSERT: u32 = 1 << 6;
    pub const DELETE: u32 = 1 << 7;
    pub const NOT_KEY: u32 = 1 << 8;
    pub const INCOMPLETE: u32 = 1 << 9;
    pub const VARIABLE_FLAGS: u32 = 1 << 10;

    /// Names in Valkey's order.
    pub const NAMES: &[(u32, &str)] = &[
        (RO, "RO"),
        (RW, "RW"),
        (OW, "OW"),
        (RM, "RM"),
        (ACCESS, "access"),
        (UPDATE, "update"),
        (INSERT, "insert"),
        (DELETE, "delete"),
        (NOT_KEY, "not_key"),
        (INCOMPLETE, "incomplete"),
        (VARIABLE_FLAGS, "variable_flags"),
    ];
}

/// Where the search for a key spec's keys begins.
#[derive(Debug, Clone, Copy)]
pub enum BeginSearch {
    /// At a fixed argument index.
    Index(i32),
    /// After a keyword, searched from `start_from` (negative: from the end, backwards).
    Keyword {
        /// The keyword, matched case-insensitively.
        keyword: &'static str,
        /// Index to start searching from.
        start_from: i32,
    },
    /// Nowhere the specs can say: the command's own key finder knows (SORT's STORE, which may
    /// appear anywhere; its BY and GET patterns, whose keys derive from the sorted values).
    Unknown,
}

/// How many keys follow the beginning.
#[derive(Debug, Clone, Copy)]
pub enum FindKeys {
    /// A range: `last_key` relative to the beginning (-1 = the last argument), every
    /// `step`-th argument; `limit` > 0 divides the remaining arguments.
    Range {
        /// Last key, relative to the beginning; negative counts from the end.
        last_key: i32,
        /// Distance between keys.
        step: i32,
        /// When `last_key` is -1: only 1/limit of the remaining arguments are keys.
        limit: i32,
    },
    /// The number of keys is an argument.
    Keynum {
        /// Index of the count, relative to the beginning.
        keynum_idx: i32,
        /// Index of the first key, relative to the beginning.
        first_key: i32,
        /// Distance between keys.
        step: i32,
    },
    /// Not known from the arguments' positions (goes with [`BeginSearch::Unknown`]).
    Unknown,
}

/// One key specification.
#[derive(Debug, Clone, Copy)]
pub struct KeySpec {
    /// `key_flags` bits.
    pub flags: u32,
    /// Where keys start.
    pub begin: BeginSearch,
    /// Which arguments are keys.
    pub find: FindKeys,
}

impl KeySpec {
    /// The common case: one key at argument `index`.
    pub const fn single(index: i32, flags: u32) -> KeySpec {
        KeySpec { flags, begin: BeginSearch::Index(index), find: FindKeys::Range { last_key: 0, step: 1, limit: 0 } }
    }

    /// Keys only the command's own key finder can find (see [`BeginSearch::Unknown`]).
    pub const fn unknown(flags: u32) -> KeySpec {
        KeySpec { flags, begin: BeginSearch::Unknown, find: FindKeys::Unknown }
    }

    /// Keys from `index` to the end (minus `from_end_skip`), every `step`.
    pub const fn range(index: i32, last_key: i32, step: i32, flags: u32) -> KeySpec {
        KeySpec { flags, begin: BeginSearch::Index(index), find: FindKeys::Range { last_key, step, limit: 0 } }
    }
}

/// A documented argument, for `COMMAND DOCS`.
#[derive(Debug, Clone, Copy)]
pub struct ArgSpec {
    /// Argument name.
    pub name: &'static str,
    /// `string`, `integer`, `double`, `key`, `pattern`, `unix-time`, `pure-token`, `oneof`,
    /// `block`.
    pub kind: &'static str,
    /// The token that introduces it, if any.
    pub token: Option<&'static str>,
    /// Index of the key spec, for `key` arguments.
    pub key_spec_index: Option<u32>,
    /// `optional`, `multiple`, `multiple_token` bits: 1, 2, 4.
    pub flags: u32,
    /// Nested arguments of `oneof` / `block`.
    pub children: &'static [ArgSpec],
}

/// Metadata of one command or subcommand, with its handler of type `H`.
#[derive(Debug)]
pub struct CommandSpec<H: 'static> {
    /// Lower-case name; for a subcommand, its own name (`encoding`).
    pub name: &'static str,
    /// Valkey arity: N exactly, or -N for at least N (the name counts).
    pub arity: i32,
    /// `flags` bits.
    pub flags: u32,
    /// `acl` bits (FAST or SLOW and the type category).
    pub acl: u32,
    /// Key specs, in order.
    pub key_specs: &'static [KeySpec],
    /// Command tips (`nondeterministic_output`, `request_policy:all_shards`, ...).
    pub tips: &'static [&'static str],
    /// Documentation group (`string`, `generic`, `server`, `connection`, ...).
    pub group: &'static str,
    /// Version of the Redis API that introduced it.
    pub since: &'static str,
    /// One-line summary.
    pub summary: &'static str,
    /// Time complexity.
    pub complexity: &'static str,
    /// Documented arguments.
    pub args: &'static [ArgSpec],
    /// Subcommands of a container command.
    pub subcommands: &'static [CommandSpec<H>],
    /// What runs it; `None` for a container command.
    pub handler: Option<H>,
    /// The command's own key finder, for a command whose keys its specs can only describe
    /// as incomplete (MIGRATE: one key, or the keys after KEYS and never the empty key
    /// before it), as Valkey's `getkeys_proc`.
    pub getkeys: Option<GetKeysFn>,
}

/// A command's own key finder: reports `found(position, key-spec flags)` for each key.
pub type GetKeysFn = fn(&Args<'_>, &mut dyn FnMut(usize, u32));

/// Why key positions could not be found: the arguments do not fit the key specs (a key
/// count that is not a number, a key past the last argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidKeyArgs;

/// Whether [`for_each_key`] found every key of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeysFound {
    /// Every key was reported.
    Complete,
    /// A spec marked `incomplete` was met: the keys reported are only those the specs could
    /// find (Valkey then asks the command's own `getkeys` function, which hotkv rows lack).
    Incomplete,
}

/// Reports the key arguments of a call, spec by spec in spec order, as `found(position,
/// key-spec flags)`, following the key specs the way Valkey's `getKeysUsingKeySpecs` does.
///
/// This is the one place that reads key specs against arguments: dispatch's plan (locks and
/// cluster routing), COMMAND GETKEYS and GETKEYSANDFLAGS all come here. Specs flagged
/// `not_key` (the channels of sharded pub/sub, Valkey's only use of the flag) are skipped
/// unless `not_keys` asks for them: they route like keys but are never locked or looked up.
pub fn for_each_key<H>(
    spec: &CommandSpec<H>,
    args: &Args<'_>,
    not_keys: bool,
    mut found: impl FnMut(usize, u32),
) -> Result<KeysFound, InvalidKeyArgs> {
    if let Some(getkeys) = spec.getkeys {
        getkeys(args, &mut |pos, flags| {
            if flags & key_flags::NOT_KEY == 0 || not_keys {
                found(pos, flags);
            }
        });
        return Ok(KeysFound::Complete);
    }
    let argc = args.len() as i32;
    let mut complete = KeysFound::Complete;
    for ks in spec.key_specs {
        if ks.flags & key_flags::NOT_KEY != 0 && !not_keys {
            continue;
        }
        let Some((first, last, step)) = spec_range(ks, args, argc)? else { continue };
        let mut i = first;
        while i <= last {
            found(i as usize, ks.flags);
            i += step.max(1);
        }
        if ks.flags & key_flags::INCOMPLETE != 0 {
            complete = KeysFound::Incomplete;
        }
    }
    Ok(complete)
}

/// The (first, last, step) argument range one key spec names in a call, `None` when it names
/// no key at all.
fn spec_range(ks: &KeySpec, args: &Args<'_>, argc: i32) -> Result<Option<(i32, i32, i32)>, InvalidKeyArgs> {
    let first = match ks.begin {
        BeginSearch::Index(i) => i,
        BeginSearch::Keyword { keyword, start_from } => {
            let found = if start_from > 0 {
                (start_from..argc).find(|&i| args.get(i as usize).eq_ignore_ascii_case(keyword.as_bytes()))
            } else {
                (1..=argc + start_from).rev().find(|&i| args.get(i as usize).eq_ignore_ascii_case(keyword.as_bytes()))
            };
            match found {
                Some(i) => i + 1,
                None => return Ok(None),
            }
        }
        // Only a command's own key finder knows such keys (Valkey: `KSPEC_BS_UNKNOWN`).
        BeginSearch::Unknown => return Ok(None),
    };
    let (first, last, step) = match ks.find {
        FindKeys::Range { last_key, step, limit } => {
            let last = if last_key >= 0 {
                first + last_key
            } else if limit == 0 {
                argc + last_key
            } else {
                first + ((argc - first) / limit + last_key)
            };
            (first, last, step)
        }
        FindKeys::Keynum { keynum_idx, first_key, step } => {
            let idx = first + keynum_idx;
            if idx >= argc {
                return Err(InvalidKeyArgs);
            }
            let n = hotkv_protocol::parse_i64(args.get(idx as usize))
                .filter(|n| *n >= 0 && *n <= i32::MAX as i64)
                .ok_or(InvalidKeyArgs)? as i32;
            let first = first + first_key;
            (first, first.saturating_add(n.saturating_mul(step)).saturating_sub(step), step)
        }
        FindKeys::Unknown => return Ok(None),
    };
    if last < first {
        // An empty range (numkeys 0, or no keys after a keyword): nothing to add.
        if matches!(ks.find, FindKeys::Keynum { .. }) {
            return Ok(None);
        }
        // An open range ("to the last argument") that starts right after the last argument
        // has no keys: `PFMERGE dest` names no sources. Valkey's key extraction fails here and
        // the command runs on no locks at all; hotkv must still lock the keys of the other
        // specs, so the empty spec is skipped instead.
        if matches!(ks.find, FindKeys::Range { last_key, limit: 0, .. } if last_key < 0) && first == argc {
            return Ok(None);
        }
        return Err(InvalidKeyArgs);
    }
    if last >= argc || first >= argc {
        return Err(InvalidKeyArgs);
    }
    Ok(Some((first, last, step)))
}

impl<H> CommandSpec<H> {
    /// A row with the common fields; documentation extras default to empty.
    #[allow(clippy::too_many_arguments)]
    pub const fn new(
        name: &'static str,
        arity: i32,
        flags: u32,
        acl: u32,
        key_specs: &'static [KeySpec],
        group: &'static str,
        since: &'static str,
        summary: &'static str,
        complexity: &'static str,
        handler: H,
    ) -> Self {
        CommandSpec {
            name,
            arity,
            flags,
            acl,
            key_specs,
            tips: &[],
            group,
            since,
            summary,
            complexity,
            args: &[],
            subcommands: &[],
            handler: Some(handler),
            getkeys: None,
        }
    }

    /// A container command (CONFIG, CLIENT, OBJECT, ...) whose rows are its subcommands.
    pub const fn container(
        name: &'static str,
        arity: i32,
        group: &'static str,
        since: &'static str,
        summary: &'static str,
        subcommands: &'static [CommandSpec<H>],
    ) -> Self {
        CommandSpec {
            name,
            arity,
            flags: 0,
            acl: 0,
            key_specs: &[],
            tips: &[],
            group,
            since,
            summary,
            complexity: "Depends on subcommand.",
            args: &[],
            subcommands,
            handler: None,
            getkeys: None,
        }
    }

    /// The same row with tips.
    pub const fn with_tips(mut self, tips: &'static [&'static str]) -> Self {
        self.tips = tips;
        self
    }

    /// The same row with its own key finder (see [`CommandSpec::getkeys`]).
    pub const fn with_getkeys(mut self, getkeys: GetKeysFn) -> Self {
        self.getkeys = Some(getkeys);
        self
    }

    /// The same row with documented arguments.
    pub const fn with_args(mut self, args: &'static [ArgSpec]) -> Self {
        self.args = args;
        self
    }

    /// ACL categories including those Valkey derives from flags (write, read, admin and
    /// dangerous, pubsub, fast or slow, blocking).
    pub fn effective_acl(&self) -> u32 {
        let mut acl = self.acl;
        if self.flags & flags::WRITE != 0 {
            acl |= acl::WRITE;
        }
        if self.flags & flags::READONLY != 0 && self.acl & acl::SCRIPTING == 0 {
            acl |= acl::READ;
        }
        if self.flags & flags::ADMIN != 0 {
            acl |= acl::ADMIN | acl::DANGEROUS;
        }
        if self.flags & flags::PUBSUB != 0 {
            acl |= acl::PUBSUB;
        }
        if self.flags & flags::FAST != 0 {
            acl |= acl::FAST;
        }
        if self.flags & flags::BLOCKING != 0 {
            acl |= acl::BLOCKING;
        }
        if acl & acl::FAST == 0 {
            acl |= acl::SLOW;
        }
        acl
    }
}

#[cfg(test)]
mod tests {
    use hotkv_protocol::Args;

    use super::*;

    fn keys(specs: &'static [KeySpec], argv: &[&str], not_keys: bool) -> Result<(Vec<(usize, u32)>, KeysFound), ()> {
        let buf: Vec<u8> = argv.concat().into_bytes();
        let mut spans = Vec::new();
        for a in argv {
            let at = spans.last().map_or(0, |&(_, e)| e);
            spans.push((at, at + a.len()));
        }
        let args = Args::from_parts(&buf, &spans);
        let spec: CommandSpec<()> =
            CommandSpec { key_specs: specs, ..CommandSpec::new("x", -1, 0, 0, &[], "", "", "", "", ()) };
        let mut found = Vec::new();
        let done = for_each_key(&spec, &args, not_keys, |p, f| found.push((p, f))).map_err(|_| ())?;
        Ok((found, done))
    }

    #[test]
    fn keys_come_with_their_spec_flags() {
        use key_flags::*;
        static SPECS: [KeySpec; 2] = [KeySpec::single(1, RW), KeySpec::range(2, -1, 2, RO)];
        assert_eq!(
            keys(&SPECS, &["x", "a", "b", "1", "c", "2"], false),
            Ok((vec![(1, RW), (2, RO), (4, RO)], KeysFound::Complete))
        );
        assert_eq!(keys(&SPECS, &["x", "a"], false), Ok((vec![(1, RW)], KeysFound::Complete)), "an empty open range");
        static NUMKEYS: [KeySpec; 1] = [KeySpec {
            flags: RO,
            begin: BeginSearch::Index(1),
            find: FindKeys::Keynum { keynum_idx: 0, first_key: 1, step: 1 },
        }];
        assert_eq!(keys(&NUMKEYS, &["x", "2", "a", "b"], false), Ok((vec![(2, RO), (3, RO)], KeysFound::Complete)));
        assert_eq!(keys(&NUMKEYS, &["x", "3", "a", "b"], false), Err(()));
        assert_eq!(keys(&NUMKEYS, &["x", "n", "a"], false), Err(()));
    }

    #[test]
    fn channels_and_incomplete_specs() {
        use key_flags::*;
        static SHARD: [KeySpec; 1] = [KeySpec::range(1, -1, 1, NOT_KEY)];
        assert_eq!(keys(&SHARD, &["x", "c1", "c2"], false), Ok((vec![], KeysFound::Complete)));
        assert_eq!(keys(&SHARD, &["x", "c1", "c2"], true), Ok((vec![(1, NOT_KEY), (2, NOT_KEY)], KeysFound::Complete)));
        static PARTIAL: [KeySpec; 2] = [KeySpec::single(1, RO | INCOMPLETE), KeySpec::single(2, RW)];
        assert_eq!(
            keys(&PARTIAL, &["x", "a", "b"], false),
            Ok((vec![(1, RO | INCOMPLETE), (2, RW)], KeysFound::Incomplete))
        );
    }
}
