//! Access control: Valkey 8.0's ACL users ([`rules`]), the user table every connection points
//! into, the permission check dispatch runs on every call, the ACL log ([`log`]) and the ACL
//! file ([`file`]).
//!
//! A connection holds an `Arc` of its user's [`UserCell`]. ACL SETUSER swaps a new [`User`]
//! into the cell, so every connection logged in as that user sees the change at its next
//! command, as Valkey's clients share one `user` struct. The cell also keeps one flag saying
//! whether the user may run everything: for the `default` user of an unconfigured server the
//! whole check is that one relaxed load.

pub mod file;
pub mod log;
pub mod rules;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arc_swap::ArcSwap;
use hotkv_engine::CommandError;
use hotkv_protocol::Args;
use parking_lot::{Mutex, RwLock};

pub use rules::{ChannelArgs, Denied, Reason, User};

use crate::config::Settings;
use crate::config::table as t;
use crate::registry::{Command, Registry};
use crate::server::Server;
use crate::session::Session;

/// One user's slot in the table: its name and its current rules.
pub struct UserCell {
    name: String,
    user: ArcSwap<User>,
    unrestricted: AtomicBool,
    /// Set when ACL DELUSER or ACL LOAD removed the user: its connections are being closed.
    deleted: AtomicBool,
}

impl UserCell {
    fn new(user: User) -> Arc<UserCell> {
        Arc::new(UserCell {
            name: user.name.clone(),
            unrestricted: AtomicBool::new(user.unrestricted()),
            user: ArcSwap::from_pointee(user),
            deleted: AtomicBool::new(false),
        })
    }

    /// The user name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The user's rules as they are now.
    pub fn rules(&self) -> Arc<User> {
        self.user.load_full()
    }

    /// Whether every command, key and channel is allowed: the check has nothing to do.
    pub fn unrestricted(&self) -> bool {
        self.unrestricted.load(Ordering::Relaxed)
    }

    fn store(&self, user: User) {
        self.unrestricted.store(user.unrestricted(), Ordering::Relaxed);
        self.user.store(Arc::new(user));
    }
}

/// Where a refused call was made (ACL LOG's `context`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// A call of its own.
    Toplevel,
    /// Queued in, or run by, a transaction.
    Multi,
    /// From a script.
    Lua,
}

impl Context {
    /// The name ACL LOG prints.
    pub fn name(self) -> &'static str {
        match self {
            Context::Toplevel => "toplevel",
            Context::Multi => "multi",
            Context::Lua => "lua",
        }
    }
}

/// The ACL state of the server.
pub struct Acl {
    users: RwLock<BTreeMap<String, Arc<UserCell>>>,
    default: Arc<UserCell>,
    /// How each command (by registry id) names channels.
    channels: Vec<ChannelArgs>,
    /// The ACL log.
    pub log: Mutex<log::AclLog>,
    /// INFO's `acl_access_denied_*`: auth, cmd, key, channel.
    denied: [AtomicU64; 4],
}

impl Acl {
    /// The table of a fresh server: `default` only, following `requirepass`.
    pub fn new(reg: &Registry, settings: &Settings) -> Acl {
        let env = env_of(reg, settings);
        let mut default = User::default_user(&env);
        set_default_password(&mut default, settings.str(t::REQUIREPASS), &env);
        let default = UserCell::new(default);
        let mut users = BTreeMap::new();
        users.insert("default".to_string(), default.clone());
        let mut channels = vec![ChannelArgs::None; reg.len()];
        for (name, kind) in [
            ("subscribe", ChannelArgs::Subscribe),
            ("ssubscribe", ChannelArgs::Subscribe),
            ("psubscribe", ChannelArgs::PatternSubscribe),
            ("publish", ChannelArgs::Publish),
            ("spublish", ChannelArgs::Publish),
        ] {
            if let Some(id) = reg.by_name(name) {
                channels[id] = kind;
            }
        }
        Acl {
            users: RwLock::new(users),
            default,
            channels,
            log: Mutex::new(log::AclLog::default()),
            denied: Default::default(),
        }
    }

    /// The `default` user.
    pub fn default_user(&self) -> Arc<UserCell> {
        self.default.clone()
    }

    /// A user by name.
    pub fn user(&self, name: &[u8]) -> Option<Arc<UserCell>> {
        let name = std::str::from_utf8(name).ok()?;
        self.users.read().get(name).cloned()
    }

    /// Every user, by name.
    pub fn users(&self) -> Vec<Arc<UserCell>> {
        self.users.read().values().cloned().collect()
    }

    /// Whether a client that has not authenticated must: the default user has a password or
    /// is off (Valkey's `authRequired`).
    pub fn auth_required(&self) -> bool {
        let d = self.default.rules();
        !d.nopass() || !d.enabled()
    }

    /// THE permission check: may `user` run this call? Nothing is allocated; for a user that
    /// may run everything it is one atomic load. `cmd` is the looked-up command (subcommand
    /// for a container), `args` the whole call. A script's `server.call` runs the same check.
    #[inline]
    pub fn check(&self, user: &UserCell, cmd: &Command, args: &Args<'_>) -> Result<(), Denied> {
        if user.unrestricted() {
            return Ok(());
        }
        self.check_rules(&user.user.load(), cmd, args)
    }

    /// Whether `user`, allowed to run this call, may also read every key (see
    /// [`User::reads_every_key`]): SORT's BY and GET patterns need it.
    pub fn reads_every_key(&self, user: &UserCell, cmd: &Command, args: &Args<'_>) -> bool {
        if user.unrestricted() {
            return true;
        }
        let channels = self.channels.get(cmd.id).copied().unwrap_or(ChannelArgs::None);
        user.user.load().reads_every_key(cmd, args, channels)
    }

    /// [`Acl::check`] against given rules (ACL DRYRUN, EXEC's second look).
    pub fn check_rules(&self, user: &User, cmd: &Command, args: &Args<'_>) -> Result<(), Denied> {
        let channels = self.channels.get(cmd.id).copied().unwrap_or(ChannelArgs::None);
        user.check(cmd, args, channels)
    }

    /// Logs in: the user exists, is on, and the password matches (or it is nopass).
    pub fn authenticate(&self, name: &[u8], pass: &[u8]) -> Option<Arc<UserCell>> {
        let cell = self.user(name)?;
        let u = cell.rules();
        (u.enabled() && u.password_matches(pass)).then_some(cell)
    }

    /// Creates or changes a user with ACL SETUSER rules; on success, the clients it must
    /// lose (subscribers to channels it may no longer use) are returned by id.
    pub fn set_user(
        &self,
        reg: &Registry,
        settings: &Settings,
        name: &str,
        ops: &[Vec<u8>],
    ) -> Result<Arc<UserCell>, String> {
        let env = env_of(reg, settings);
        let mut users = self.users.write();
        let existing = users.get(name).cloned();
        let mut user = match &existing {
            Some(cell) => (*cell.rules()).clone(),
            None => User::new(name, &env),
        };
        user.apply_all(ops, &env)?;
        let cell = match existing {
            Some(cell) => {
                cell.store(user);
                cell
            }
            None => {
                let cell = UserCell::new(user);
                users.insert(name.to_string(), cell.clone());
                cell
            }
        };
        Ok(cell)
    }

    /// Removes users (never `default`); returns the removed cells.
    pub fn delete_users(&self, names: &[&[u8]]) -> Vec<Arc<UserCell>> {
        let mut users = self.users.write();
        let mut gone = Vec::new();
        for n in names {
            let Ok(n) = std::str::from_utf8(n) else { continue };
            if n == "default" {
                continue;
            }
            if let Some(cell) = users.remove(n) {
                cell.deleted.store(true, Ordering::Relaxed);
                gone.push(cell);
            }
        }
        gone
    }

    /// Replaces every user with `new` (ACL LOAD, startup): a user that stays keeps its cell,
    /// so its connections follow the new rules; the removed ones are returned.
    pub fn replace_all(&self, new: Vec<User>) -> Vec<Arc<UserCell>> {
        let mut users = self.users.write();
        let mut next = BTreeMap::new();
        for u in new {
            let cell = match users.remove(&u.name) {
                Some(cell) => {
                    cell.store(u);
                    cell
                }
                None => UserCell::new(u),
            };
            next.insert(cell.name.clone(), cell);
        }
        let gone: Vec<_> = std::mem::replace(&mut *users, next).into_values().collect();
        for cell in &gone {
            cell.deleted.store(true, Ordering::Relaxed);
        }
        gone
    }

    /// `requirepass` changed: the default user gets that password, or nopass.
    pub fn apply_requirepass(&self, reg: &Registry, settings: &Settings) {
        let env = env_of(reg, settings);
        let _users = self.users.write();
        let mut d = (*self.default.rules()).clone();
        set_default_password(&mut d, settings.str(t::REQUIREPASS), &env);
        self.default.store(d);
    }

    /// Counts a refusal for INFO.
    pub fn count_denied(&self, reason: Reason) {
        let i = match reason {
            Reason::Auth => 0,
            Reason::Command => 1,
            Reason::Key => 2,
            Reason::Channel => 3,
        };
        self.denied[i].fetch_add(1, Ordering::Relaxed);
    }

    /// INFO's `acl_access_denied_auth`, `_cmd`, `_key`, `_channel`.
    pub fn denied_counts(&self) -> [u64; 4] {
        std::array::from_fn(|i| self.denied[i].load(Ordering::Relaxed))
    }

    /// The rule environment for the current settings.
    pub fn env<'a>(&self, reg: &'a Registry, settings: &Settings) -> rules::Env<'a> {
        env_of(reg, settings)
    }
}

impl UserCell {
    /// Whether the user was removed (ACL DELUSER, ACL LOAD).
    pub fn is_deleted(&self) -> bool {
        self.deleted.load(Ordering::Relaxed)
    }
}

/// Counts a refusal and adds it to ACL LOG: `object` is the command, key or channel refused (or
/// the command as typed, for a failed login), `username` the name tried at login, else the
/// session's user. The context is `multi` inside a transaction.
pub fn record(srv: &Server, sess: &Session, reason: Reason, object: String, username: Option<String>) {
    let context = if sess.multi.is_some() || sess.in_exec { Context::Multi } else { Context::Toplevel };
    record_in(srv, sess, reason, context, object, username);
}

/// [`record`] with an explicit context (a script's calls are `lua`).
pub fn record_in(
    srv: &Server,
    sess: &Session,
    reason: Reason,
    context: Context,
    object: String,
    username: Option<String>,
) {
    srv.acl.count_denied(reason);
    let max_len = srv.settings.load().int(t::ACLLOG_MAX_LEN).max(0) as usize;
    let now_ms = crate::server::unix_ms();
    let running = (sess.running as usize).checked_sub(1).map(|id| srv.registry.get(id).full_name.as_str());
    let current = crate::cmd::client::Current { id: sess.id, cmd: running.unwrap_or("NULL"), argv_mem: 0 };
    let client_info = crate::cmd::client::client_line(&srv.registry, &sess.info, now_ms, &current);
    let entry = log::Entry {
        count: 1,
        reason,
        context,
        object,
        username: username.unwrap_or_else(|| sess.user.clone()),
        updated_ms: now_ms,
        client_info,
        entry_id: 0,
        created_ms: now_ms,
    };
    srv.acl.log.lock().add(entry, max_len);
}

/// A refused call: counted, logged in ACL LOG, and answered with NOPERM.
pub fn refuse(srv: &Server, sess: &Session, cmd: &Command, args: &Args<'_>, d: Denied) -> CommandError {
    record(srv, sess, d.reason, denied_object(cmd, args, d), None);
    denied_error(&sess.user, cmd, args, d)
}

/// What ACL LOG names for a refusal: the command's full name, or the key or channel.
pub fn denied_object(cmd: &Command, args: &Args<'_>, d: Denied) -> String {
    match d.reason {
        Reason::Command | Reason::Auth => cmd.full_name.clone(),
        Reason::Key | Reason::Channel => String::from_utf8_lossy(args.opt(d.pos).unwrap_or_default()).into_owned(),
    }
}

/// EXEC checks each queued command again: the rules may have changed since it was queued.
pub fn recheck_queued(srv: &Server, sess: &Session, cmd: &Command, args: &Args<'_>) -> Result<(), CommandError> {
    let Some(user) = &sess.acl_user else { return Ok(()) };
    let Err(d) = srv.acl.check(user, cmd, args) else { return Ok(()) };
    record_in(srv, sess, d.reason, Context::Multi, denied_object(cmd, args, d), None);
    let why = match d.reason {
        Reason::Command => "no permission to execute the command or subcommand",
        Reason::Key => "no permission to touch the specified keys",
        Reason::Channel => "no permission to access one of the channels used as arguments",
        Reason::Auth => "no permission",
    };
    Err(CommandError::raw(format!(
        "NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This \
         command is no longer allowed for the following reason: {why}"
    )))
}

/// The NOPERM error of a refused call, word for word as Valkey's `getAclErrorMessage` (the
/// short form for keys and channels; `verbose` is ACL DRYRUN's long one, without `NOPERM`).
pub fn denied_message(user: &str, cmd: &Command, args: &Args<'_>, d: Denied, verbose: bool) -> String {
    match d.reason {
        Reason::Command => format!("User {user} has no permissions to run the '{}' command", cmd.full_name),
        Reason::Key if verbose => format!(
            "User {user} has no permissions to access the '{}' key",
            String::from_utf8_lossy(args.opt(d.pos).unwrap_or_default())
        ),
        Reason::Channel if verbose => format!(
            "User {user} has no permissions to access the '{}' channel",
            String::from_utf8_lossy(args.opt(d.pos).unwrap_or_default())
        ),
        Reason::Key => "No permissions to access a key".into(),
        Reason::Channel => "No permissions to access a channel".into(),
        Reason::Auth => "no permission".into(),
    }
}

/// The reply to a refused call: `-NOPERM ...`.
pub fn denied_error(user: &str, cmd: &Command, args: &Args<'_>, d: Denied) -> CommandError {
    CommandError::raw(format!("NOPERM {}", denied_message(user, cmd, args, d, false)))
}

/// The rule environment: the commands and `acl-pubsub-default`.
fn env_of<'a>(reg: &'a Registry, settings: &Settings) -> rules::Env<'a> {
    rules::Env { reg, all_channels_default: settings.str(t::ACL_PUBSUB_DEFAULT).eq_ignore_ascii_case("allchannels") }
}

/// Valkey's `ACLUpdateDefaultUserPassword`.
fn set_default_password(user: &mut User, pass: &str, env: &rules::Env<'_>) {
    let _ = user.apply(b"resetpass", env);
    let op = if pass.is_empty() { b"nopass".to_vec() } else { [b">".as_slice(), pass.as_bytes()].concat() };
    let _ = user.apply(&op, env);
}

#[cfg(test)]
mod tests;
