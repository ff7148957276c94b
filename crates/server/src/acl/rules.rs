//! An ACL user and its selectors: the rule language of `ACL SETUSER` (Valkey 8.0's
//! `ACLSetUser` / `ACLSetSelector`), the permission check on a call, and the descriptions
//! `ACL LIST` and `ACL GETUSER` print.
//!
//! A user is a plain value: changing one builds a new copy and swaps it in whole (see
//! [`super::UserCell`]), so a rule that fails half way through a SETUSER leaves nothing behind,
//! as Valkey stages its changes on a temporary user.

use std::fmt;

use hotkv_engine::command::key_flags;
use hotkv_engine::glob;
use hotkv_protocol::Args;
use sha2::{Digest, Sha256};

use crate::registry::{Command, Registry};

/// Why an ACL rule was refused (Valkey's errno values in `ACLSetUser`, same texts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleError {
    /// `ENOENT`: an unknown command or category.
    UnknownName,
    /// `EINVAL`: not a rule, or a pattern with spaces.
    Syntax,
    /// `EEXIST`: a key pattern after `allkeys`.
    KeyAfterAll,
    /// `EISDIR`: a channel pattern after `allchannels`.
    ChannelAfterAll,
    /// `ENODEV`: removing a password the user does not have.
    NoSuchPassword,
    /// `EBADMSG`: a `#`/`!` hash that is not 64 lowercase hex digits.
    BadHash,
    /// `EALREADY`: a user defined twice in the configuration.
    Duplicate,
    /// `ECHILD`: `+config|get|x`.
    FirstArgOfSubcommand,
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RuleError::UnknownName => "Unknown command or category name in ACL",
            RuleError::Syntax => "Syntax error",
            RuleError::KeyAfterAll => {
                "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any \
                 effect. Try 'resetkeys' to start with an empty list of patterns"
            }
            RuleError::ChannelAfterAll => {
                "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have \
                 any effect. Try 'resetchannels' to start with an empty list of channels"
            }
            RuleError::NoSuchPassword => "The password you are trying to remove from the user does not exist",
            RuleError::BadHash => {
                "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters"
            }
            RuleError::Duplicate => "Duplicate user found. A user can only be defined once in config files",
            RuleError::FirstArgOfSubcommand => "Allowing first-arg of a subcommand is not supported",
        })
    }
}

impl std::error::Error for RuleError {}

/// What a rule needs to know besides the user: the commands and `acl-pubsub-default`.
#[derive(Clone, Copy)]
pub struct Env<'a> {
    /// Every command, for `+cmd` and `+@category`.
    pub reg: &'a Registry,
    /// `acl-pubsub-default allchannels`: new selectors start with every channel.
    pub all_channels_default: bool,
}

/// Why a call was refused, and the argument that made it so (0 for the command itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Denied {
    /// What was refused.
    pub reason: Reason,
    /// Index of the refused key or channel in the call's arguments.
    pub pos: usize,
}

/// What an ACL refused; ordered as Valkey ranks them when selectors disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    /// The command (or subcommand).
    Command,
    /// A key.
    Key,
    /// Authentication (ACL LOG only).
    Auth,
    /// A pub/sub channel.
    Channel,
}

impl Reason {
    /// ACL LOG's `reason` field.
    pub fn name(self) -> &'static str {
        match self {
            Reason::Command => "command",
            Reason::Key => "key",
            Reason::Auth => "auth",
            Reason::Channel => "channel",
        }
    }
}

/// How a command names pub/sub channels (Valkey's `commands_with_channels`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelArgs {
    /// No channel argument that ACLs check.
    None,
    /// Every argument from the first is a channel to subscribe to.
    Subscribe,
    /// Every argument from the first is a pattern, matched literally against the user's.
    PatternSubscribe,
    /// The first argument is a channel to publish to.
    Publish,
}

/// User flags, in the order ACL LIST and GETUSER print them.
pub mod uflag {
    /// `on`.
    pub const ENABLED: u8 = 1 << 0;
    /// `off`.
    pub const DISABLED: u8 = 1 << 1;
    /// `nopass`.
    pub const NOPASS: u8 = 1 << 2;
    /// `skip-sanitize-payload`.
    pub const SKIP_SANITIZE: u8 = 1 << 3;
    /// `sanitize-payload`.
    pub const SANITIZE: u8 = 1 << 4;
    /// Names in Valkey's `ACLUserFlags` order.
    pub const NAMES: &[(u8, &str)] = &[
        (ENABLED, "on"),
        (DISABLED, "off"),
        (NOPASS, "nopass"),
        (SKIP_SANITIZE, "skip-sanitize-payload"),
        (SANITIZE, "sanitize-payload"),
    ];
}

const ALL_KEYS: u8 = 1 << 0;
const ALL_CHANNELS: u8 = 1 << 1;
/// Every command bit is set: the bitmap need not be read.
const ALL_COMMANDS: u8 = 1 << 2;
/// Set by `+@all` only: the rules start from "everything" (Valkey's reserved command bit).
const FUTURE: u8 = 1 << 3;

const READ: u8 = 1;
const WRITE: u8 = 2;

/// One key pattern: `~p` (read and write), `%R~p`, `%W~p`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KeyPattern {
    access: u8,
    pattern: String,
}

/// One set of permissions; a call is allowed when any of the user's selectors allows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    flags: u8,
    /// One bit per registry id.
    allowed: Vec<u64>,
    /// `+select|0`: first arguments allowed for a command whose bit is off.
    first_args: Vec<(usize, Vec<String>)>,
    /// The command rules in the order given, each one once (`+get`, `-@write`), which
    /// describe the bitmap together with the leading `+@all`/`-@all`.
    rules: Vec<String>,
    keys: Vec<KeyPattern>,
    channels: Vec<String>,
}

/// An ACL user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// The user name.
    pub name: String,
    flags: u8,
    /// SHA-256 hex digests.
    passwords: Vec<String>,
    /// The root selector first, then the `(...)` ones.
    selectors: Vec<Selector>,
}

impl User {
    /// A new user as Valkey creates one: off, no password, no permissions.
    pub fn new(name: &str, env: &Env<'_>) -> User {
        User {
            name: name.to_string(),
            flags: uflag::DISABLED | uflag::SANITIZE,
            passwords: Vec::new(),
            selectors: vec![Selector::new(env)],
        }
    }

    /// The `default` user of a fresh server: on, nopass, everything.
    pub fn default_user(env: &Env<'_>) -> User {
        let mut u = User::new("default", env);
        for op in ["+@all", "~*", "&*", "on", "nopass"] {
            // Fixed rules that always parse.
            let _ = u.apply(op.as_bytes(), env);
        }
        u
    }

    /// Whether the user may log in.
    pub fn enabled(&self) -> bool {
        self.flags & uflag::DISABLED == 0
    }

    /// Whether any password logs the user in.
    pub fn nopass(&self) -> bool {
        self.flags & uflag::NOPASS != 0
    }

    /// `skip-sanitize-payload`.
    pub fn skips_sanitize(&self) -> bool {
        self.flags & uflag::SKIP_SANITIZE != 0
    }

    /// Whether every command, key and channel is allowed (the check can be skipped).
    pub fn unrestricted(&self) -> bool {
        let root = &self.selectors[0];
        root.flags & (ALL_COMMANDS | ALL_KEYS | ALL_CHANNELS) == (ALL_COMMANDS | ALL_KEYS | ALL_CHANNELS)
    }

    /// Whether `pass` logs this user in (constant time in the digest comparison).
    pub fn password_matches(&self, pass: &[u8]) -> bool {
        if self.nopass() {
            return true;
        }
        let digest = hash_password(pass);
        let mut ok = false;
        for p in &self.passwords {
            ok |= constant_time_eq(p.as_bytes(), digest.as_bytes());
        }
        ok
    }

    /// Applies a list of rules as ACL SETUSER does: selectors spread over several arguments
    /// are joined first, and the first bad rule leaves the user as it was.
    pub fn apply_all(&mut self, args: &[Vec<u8>], env: &Env<'_>) -> Result<(), String> {
        let merged = merge_selectors(args).map_err(|at| {
            format!("Unmatched parenthesis in acl selector starting at '{}'.", String::from_utf8_lossy(&args[at]))
        })?;
        let mut staged = self.clone();
        for op in &merged {
            staged
                .apply(op, env)
                .map_err(|e| format!("Error in ACL SETUSER modifier '{}': {e}", String::from_utf8_lossy(op)))?;
        }
        *self = staged;
        Ok(())
    }

    /// Applies one rule (Valkey's `ACLSetUser`).
    pub fn apply(&mut self, op: &[u8], env: &Env<'_>) -> Result<(), RuleError> {
        if op.is_empty() {
            return Ok(());
        }
        let is = |word: &str| op.eq_ignore_ascii_case(word.as_bytes());
        if is("on") {
            self.flags = (self.flags | uflag::ENABLED) & !uflag::DISABLED;
        } else if is("off") {
            self.flags = (self.flags | uflag::DISABLED) & !uflag::ENABLED;
        } else if is("skip-sanitize-payload") {
            self.flags = (self.flags | uflag::SKIP_SANITIZE) & !uflag::SANITIZE;
        } else if is("sanitize-payload") {
            self.flags = (self.flags | uflag::SANITIZE) & !uflag::SKIP_SANITIZE;
        } else if is("nopass") {
            self.flags |= uflag::NOPASS;
            self.passwords.clear();
        } else if is("resetpass") {
            self.flags &= !uflag::NOPASS;
            self.passwords.clear();
        } else if op[0] == b'>' || op[0] == b'#' {
            let hash = if op[0] == b'>' { hash_password(&op[1..]) } else { checked_hash(&op[1..])? };
            if !self.passwords.contains(&hash) {
                self.passwords.push(hash);
            }
            self.flags &= !uflag::NOPASS;
        } else if op[0] == b'<' || op[0] == b'!' {
            let hash = if op[0] == b'<' { hash_password(&op[1..]) } else { checked_hash(&op[1..])? };
            let at = self.passwords.iter().position(|p| *p == hash).ok_or(RuleError::NoSuchPassword)?;
            self.passwords.remove(at);
        } else if op[0] == b'(' && op[op.len() - 1] == b')' {
            let inner = &op[1..op.len() - 1];
            let parts = hotkv_protocol::split_args(inner).map_err(|_| RuleError::Syntax)?;
            let mut s = Selector::new(env);
            for p in &parts {
                s.apply(p, env)?;
            }
            self.selectors.push(s);
        } else if is("clearselectors") {
            self.selectors.truncate(1);
        } else if is("reset") {
            for r in ["resetpass", "resetkeys", "resetchannels"] {
                self.apply(r.as_bytes(), env)?;
            }
            if env.all_channels_default {
                self.apply(b"allchannels", env)?;
            }
            for r in ["off", "sanitize-payload", "clearselectors", "-@all"] {
                self.apply(r.as_bytes(), env)?;
            }
        } else {
            self.selectors[0].apply(op, env)?;
        }
        Ok(())
    }

    /// The rules that recreate this user, as ACL LIST and the ACL file write them (without
    /// the `user <name> ` prefix).
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (bit, name) in uflag::NAMES {
            if self.flags & bit != 0 {
                out.push_str(name);
                out.push(' ');
            }
        }
        for p in &self.passwords {
            out.push('#');
            out.push_str(p);
            out.push(' ');
        }
        for (i, s) in self.selectors.iter().enumerate() {
            if i == 0 {
                out.push_str(&s.describe());
            } else {
                out.push_str(" (");
                out.push_str(&s.describe());
                out.push(')');
            }
        }
        out
    }

    /// The flag names, for ACL GETUSER.
    pub fn flag_names(&self) -> impl Iterator<Item = &'static str> + '_ {
        uflag::NAMES.iter().filter(|(bit, _)| self.flags & bit != 0).map(|(_, n)| *n)
    }

    /// The password digests, for ACL GETUSER.
    pub fn passwords(&self) -> &[String] {
        &self.passwords
    }

    /// The root selector, then the others.
    pub fn selectors(&self) -> &[Selector] {
        &self.selectors
    }

    /// Whether the user may run this call: the first selector that allows it wins; when none
    /// does, the refusal Valkey would report (the command, else the last key or channel).
    pub fn check(&self, cmd: &Command, args: &Args<'_>, channels: ChannelArgs) -> Result<(), Denied> {
        self.check_selectors(cmd, args, channels)
    }

    /// Valkey's `ACLUserCheckCmdWithUnrestrictedKeyAccess` for reading: whether a selector
    /// that allows this call may also read every key (`allkeys`, or a `~*` or `%R~*` pattern).
    /// SORT lets only such users read keys through BY and GET patterns.
    pub fn reads_every_key(&self, cmd: &Command, args: &Args<'_>, channels: ChannelArgs) -> bool {
        self.selectors.iter().any(|s| s.check(cmd, args, channels).is_ok() && s.reads_every_key())
    }

    fn check_selectors(&self, cmd: &Command, args: &Args<'_>, channels: ChannelArgs) -> Result<(), Denied> {
        let mut worst = Denied { reason: Reason::Command, pos: 0 };
        for s in &self.selectors {
            match s.check(cmd, args, channels) {
                Ok(()) => return Ok(()),
                Err(d) => {
                    if d.reason > worst.reason || (d.reason == worst.reason && d.pos > worst.pos) {
                        worst = d;
                    }
                }
            }
        }
        Err(worst)
    }

    /// Whether some selector allows this channel (`pattern`: a PSUBSCRIBE pattern, matched
    /// literally), for deciding which subscribers lose their subscriptions.
    pub fn channel_allowed(&self, channel: &[u8], pattern: bool) -> bool {
        self.selectors.iter().any(|s| s.flags & ALL_CHANNELS != 0 || s.channel_matches(channel, pattern))
    }

    /// Whether some selector allows every channel.
    pub fn all_channels(&self) -> bool {
        self.selectors.iter().any(|s| s.flags & ALL_CHANNELS != 0)
    }

    /// Every channel pattern of every selector.
    pub fn channel_patterns(&self) -> impl Iterator<Item = &str> {
        self.selectors.iter().flat_map(|s| s.channels.iter().map(String::as_str))
    }
}

impl Selector {
    fn new(env: &Env<'_>) -> Selector {
        Selector {
            flags: if env.all_channels_default { ALL_CHANNELS } else { 0 },
            allowed: vec![0; env.reg.len().div_ceil(64)],
            first_args: Vec::new(),
            rules: Vec::new(),
            keys: Vec::new(),
            channels: Vec::new(),
        }
    }

    /// Applies a selector rule (Valkey's `ACLSetSelector`).
    fn apply(&mut self, op: &[u8], env: &Env<'_>) -> Result<(), RuleError> {
        let is = |word: &str| op.eq_ignore_ascii_case(word.as_bytes());
        if is("allkeys") || op == b"~*" {
            self.flags |= ALL_KEYS;
            self.keys.clear();
        } else if is("resetkeys") {
            self.flags &= !ALL_KEYS;
            self.keys.clear();
        } else if is("allchannels") || op == b"&*" {
            self.flags |= ALL_CHANNELS;
            self.channels.clear();
        } else if is("resetchannels") {
            self.flags &= !ALL_CHANNELS;
            self.channels.clear();
        } else if is("allcommands") || is("+@all") {
            self.allowed.iter_mut().for_each(|w| *w = u64::MAX);
            self.flags |= ALL_COMMANDS | FUTURE;
            self.rules.clear();
            self.first_args.clear();
        } else if is("nocommands") || is("-@all") {
            self.allowed.iter_mut().for_each(|w| *w = 0);
            self.flags &= !(ALL_COMMANDS | FUTURE);
            self.rules.clear();
            self.first_args.clear();
        } else if op[0] == b'~' || op[0] == b'%' {
            self.add_key_pattern(op)?;
        } else if op[0] == b'&' {
            if self.flags & ALL_CHANNELS != 0 {
                return Err(RuleError::ChannelAfterAll);
            }
            let pat = text_without_spaces(&op[1..])?;
            if !self.channels.contains(&pat) {
                self.channels.push(pat);
            }
            self.flags &= !ALL_CHANNELS;
        } else if op.len() > 1 && op[0] == b'+' && op[1] != b'@' {
            self.allow_command(&String::from_utf8_lossy(&op[1..]), env)?;
        } else if op.len() > 1 && op[0] == b'-' && op[1] != b'@' {
            let id = lookup(env.reg, &String::from_utf8_lossy(&op[1..])).ok_or(RuleError::UnknownName)?;
            self.change(env.reg, id, false);
            self.update_rules(&env.reg.get(id).full_name, false);
        } else if op.len() > 1 && (op[0] == b'+' || op[0] == b'-') && op[1] == b'@' {
            let name = String::from_utf8_lossy(&op[2..]).to_ascii_lowercase();
            let bit = category(&name).ok_or(RuleError::UnknownName)?;
            let allow = op[0] == b'+';
            self.update_rules(&format!("@{name}"), allow);
            let ids: Vec<usize> = env.reg.all().filter(|c| c.spec.effective_acl() & bit != 0).map(|c| c.id).collect();
            for id in ids {
                self.change(env.reg, id, allow);
            }
        } else {
            return Err(RuleError::Syntax);
        }
        Ok(())
    }

    fn add_key_pattern(&mut self, op: &[u8]) -> Result<(), RuleError> {
        if self.flags & ALL_KEYS != 0 {
            return Err(RuleError::KeyAfterAll);
        }
        let (access, offset) = if op[0] == b'%' {
            let mut access = 0;
            let mut offset = 1;
            loop {
                let Some(&c) = op.get(offset) else { return Err(RuleError::Syntax) };
                offset += 1;
                match c.to_ascii_uppercase() {
                    b'R' if access & READ == 0 => access |= READ,
                    b'W' if access & WRITE == 0 => access |= WRITE,
                    b'~' if access != 0 => break,
                    _ => return Err(RuleError::Syntax),
                }
            }
            (access, offset)
        } else {
            (READ | WRITE, 1)
        };
        let pattern = text_without_spaces(&op[offset..])?;
        match self.keys.iter_mut().find(|k| k.pattern == pattern) {
            Some(k) => k.access |= access,
            None => self.keys.push(KeyPattern { access, pattern }),
        }
        self.flags &= !ALL_KEYS;
        Ok(())
    }

    fn allow_command(&mut self, name: &str, env: &Env<'_>) -> Result<(), RuleError> {
        let Some((base, first)) = name.rsplit_once('|') else {
            let id = lookup(env.reg, name).ok_or(RuleError::UnknownName)?;
            self.change(env.reg, id, true);
            self.update_rules(&env.reg.get(id).full_name, true);
            return Ok(());
        };
        let id = lookup(env.reg, base).ok_or(RuleError::UnknownName)?;
        let cmd = env.reg.get(id);
        if cmd.parent.is_some() {
            return Err(RuleError::FirstArgOfSubcommand);
        }
        if first.is_empty() {
            return Err(RuleError::Syntax);
        }
        if cmd.subs.is_empty() {
            // Valkey's deprecated first-arg form (`+select|0`): a warning, and it works.
            tracing::warn!(
                "Deprecation warning: Allowing a first arg of an otherwise blocked command is a misuse of ACL and \
                 may get disabled in the future (offender: +{name})"
            );
            match self.first_args.iter_mut().find(|(c, _)| *c == id) {
                Some((_, list)) => {
                    if !list.iter().any(|a| a.eq_ignore_ascii_case(first)) {
                        list.push(first.to_string());
                    }
                }
                None => self.first_args.push((id, vec![first.to_string()])),
            }
        } else {
            let sub = lookup(env.reg, name).ok_or(RuleError::UnknownName)?;
            self.change(env.reg, sub, true);
        }
        self.update_rules(&name.to_ascii_lowercase(), true);
        Ok(())
    }

    /// Allows or denies a command; a container's subcommands follow it.
    fn change(&mut self, reg: &Registry, id: usize, allow: bool) {
        self.set_bit(id, allow);
        self.first_args.retain(|(c, _)| *c != id);
        for &sub in &reg.get(id).subs {
            self.set_bit(sub, allow);
        }
    }

    fn set_bit(&mut self, id: usize, allow: bool) {
        let (w, b) = (id / 64, 1u64 << (id % 64));
        if w >= self.allowed.len() {
            return;
        }
        if allow {
            self.allowed[w] |= b;
        } else {
            self.allowed[w] &= !b;
            self.flags &= !ALL_COMMANDS;
        }
    }

    fn bit(&self, id: usize) -> bool {
        self.allowed.get(id / 64).is_some_and(|w| w & (1 << (id % 64)) != 0)
    }

    /// Keeps the rule text in order, each command once: a rule replaces an earlier one for the
    /// same command and, for a whole command, those for its subcommands (Valkey's
    /// `ACLUpdateCommandRules`).
    fn update_rules(&mut self, name: &str, allow: bool) {
        let name = name.to_ascii_lowercase();
        self.rules.retain(|r| {
            let r = &r[1..];
            !(r == name || (r.len() > name.len() && r.starts_with(&name) && r.as_bytes()[name.len()] == b'|'))
        });
        self.rules.push(format!("{}{name}", if allow { '+' } else { '-' }));
    }

    /// `+@all`/`-@all` followed by the rules (`ACLDescribeSelectorCommandRules`).
    pub fn command_rules(&self) -> String {
        let mut out = String::from(if self.flags & FUTURE != 0 { "+@all" } else { "-@all" });
        for r in &self.rules {
            out.push(' ');
            out.push_str(r);
        }
        out
    }

    /// The key patterns as GETUSER shows them (`~*` for allkeys).
    pub fn keys_text(&self) -> String {
        if self.flags & ALL_KEYS != 0 {
            return "~*".into();
        }
        self.keys.iter().map(KeyPattern::text).collect::<Vec<_>>().join(" ")
    }

    /// The channel patterns as GETUSER shows them (`&*` for allchannels).
    pub fn channels_text(&self) -> String {
        if self.flags & ALL_CHANNELS != 0 {
            return "&*".into();
        }
        self.channels.iter().map(|c| format!("&{c}")).collect::<Vec<_>>().join(" ")
    }

    fn describe(&self) -> String {
        let mut out = String::new();
        if self.flags & ALL_KEYS != 0 {
            out.push_str("~* ");
        } else {
            for k in &self.keys {
                out.push_str(&k.text());
                out.push(' ');
            }
        }
        if self.flags & ALL_CHANNELS != 0 {
            out.push_str("&* ");
        } else {
            out.push_str("resetchannels ");
            for c in &self.channels {
                out.push('&');
                out.push_str(c);
                out.push(' ');
            }
        }
        out.push_str(&self.command_rules());
        out
    }

    fn check(&self, cmd: &Command, args: &Args<'_>, channels: ChannelArgs) -> Result<(), Denied> {
        let denied = |reason, pos| Err(Denied { reason, pos });
        if self.flags & ALL_COMMANDS == 0
            && cmd.spec.flags() & hotkv_engine::command::flags::NO_AUTH == 0
            && !self.bit(cmd.id)
        {
            let idx = if cmd.parent.is_some() { 2 } else { 1 };
            let allowed = self.first_args.iter().find(|(c, _)| *c == cmd.id).is_some_and(|(_, list)| {
                args.opt(idx).is_some_and(|a| list.iter().any(|f| a.eq_ignore_ascii_case(f.as_bytes())))
            });
            if !allowed {
                return denied(Reason::Command, 0);
            }
        }
        if self.flags & ALL_KEYS == 0 && !cmd.spec.key_specs().is_empty() {
            let mut refused = None;
            let _ = cmd.spec.for_each_key(args, |pos, flags| {
                let flags = variable_key_flags(cmd, args, flags);
                if refused.is_none() && !self.key_allowed(args.get(pos), flags) {
                    refused = Some(pos);
                }
            });
            if let Some(pos) = refused {
                return denied(Reason::Key, pos);
            }
        }
        if self.flags & ALL_CHANNELS == 0 {
            let (range, pattern) = match channels {
                ChannelArgs::None => return Ok(()),
                ChannelArgs::Subscribe => (1..args.len(), false),
                ChannelArgs::PatternSubscribe => (1..args.len(), true),
                ChannelArgs::Publish => (1..args.len().min(2), false),
            };
            for pos in range {
                if !self.channel_matches(args.get(pos), pattern) {
                    return denied(Reason::Channel, pos);
                }
            }
        }
        Ok(())
    }

    fn reads_every_key(&self) -> bool {
        self.flags & ALL_KEYS != 0 || self.keys.iter().any(|k| k.access & READ != 0 && k.pattern == "*")
    }

    fn key_allowed(&self, key: &[u8], spec_flags: u32) -> bool {
        let mut need = 0;
        if spec_flags & key_flags::ACCESS != 0 {
            need |= READ;
        }
        if spec_flags & (key_flags::INSERT | key_flags::DELETE | key_flags::UPDATE) != 0 {
            need |= WRITE;
        }
        self.keys.iter().any(|k| k.access & need == need && glob::matches(k.pattern.as_bytes(), key, false))
    }

    fn channel_matches(&self, channel: &[u8], pattern: bool) -> bool {
        self.channels
            .iter()
            .any(|p| if pattern { p.as_bytes() == channel } else { glob::matches(p.as_bytes(), channel, false) })
    }
}

impl KeyPattern {
    fn text(&self) -> String {
        let prefix = match self.access {
            READ => "%R~",
            WRITE => "%W~",
            _ => "~",
        };
        format!("{prefix}{}", self.pattern)
    }
}

/// The key flags of a call whose row says they depend on the arguments: SET without GET only
/// overwrites, BITFIELD with only GETs only reads (Valkey's `setGetKeys`, `bitfieldGetKeys`).
fn variable_key_flags(cmd: &Command, args: &Args<'_>, flags: u32) -> u32 {
    if flags & key_flags::VARIABLE_FLAGS == 0 {
        return flags;
    }
    match cmd.full_name.as_str() {
        "set" if args.iter().skip(3).any(|a| a.eq_ignore_ascii_case(b"get")) => {
            key_flags::RW | key_flags::ACCESS | key_flags::UPDATE
        }
        "set" => key_flags::OW | key_flags::UPDATE,
        "bitfield" if bitfield_reads_only(args) => key_flags::RO | key_flags::ACCESS,
        "bitfield" => key_flags::RW | key_flags::ACCESS | key_flags::UPDATE,
        _ => flags,
    }
}

fn bitfield_reads_only(args: &Args<'_>) -> bool {
    let mut i = 2;
    while i < args.len() {
        let rest = args.len() - i - 1;
        let a = args.get(i);
        if a.eq_ignore_ascii_case(b"get") && rest >= 2 {
            i += 3;
        } else if a.eq_ignore_ascii_case(b"overflow") && rest >= 1 {
            i += 2;
        } else {
            return false;
        }
    }
    true
}

/// Joins a selector spread over several arguments (`(~x`, `+get)`) into one; on an unclosed
/// one, the index of the argument that opened it (`ACLMergeSelectorArguments`).
pub fn merge_selectors(args: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, usize> {
    let mut out = Vec::with_capacity(args.len());
    let mut open: Option<(usize, Vec<u8>)> = None;
    for (j, op) in args.iter().enumerate() {
        if let Some((_, sel)) = &mut open {
            sel.push(b' ');
            sel.extend_from_slice(op);
            if op.last() == Some(&b')') {
                out.push(open.take().map(|(_, s)| s).unwrap_or_default());
            }
            continue;
        }
        if op.first() == Some(&b'(') && op.last() != Some(&b')') {
            open = Some((j, op.clone()));
            continue;
        }
        out.push(op.clone());
    }
    match open {
        Some((j, _)) => Err(j),
        None => Ok(out),
    }
}

/// Whether a user name or pattern has a blank or a NUL (Valkey's `ACLStringHasSpaces`).
pub fn has_spaces(s: &[u8]) -> bool {
    s.iter().any(|&c| c.is_ascii_whitespace() || c == 0x0b || c == 0)
}

/// The SHA-256 of a password as 64 lowercase hex digits.
pub fn hash_password(pass: &[u8]) -> String {
    let digest = Sha256::digest(pass);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The category bit of a name (`read`), from the engine's table.
pub fn category(name: &str) -> Option<u32> {
    hotkv_engine::command::acl::NAMES.iter().find(|(_, n)| n.eq_ignore_ascii_case(name)).map(|(b, _)| *b)
}

fn lookup(reg: &Registry, name: &str) -> Option<usize> {
    if name.matches('|').count() > 1 {
        return None;
    }
    reg.by_name(name)
}

fn checked_hash(h: &[u8]) -> Result<String, RuleError> {
    if h.len() != 64 || !h.iter().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c)) {
        return Err(RuleError::BadHash);
    }
    Ok(String::from_utf8_lossy(h).into_owned())
}

fn text_without_spaces(s: &[u8]) -> Result<String, RuleError> {
    if has_spaces(s) {
        return Err(RuleError::Syntax);
    }
    Ok(String::from_utf8_lossy(s).into_owned())
}

/// Compares without an early exit, so timing does not reveal how much of a digest matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        diff |= usize::from(a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0));
    }
    diff == 0
}
