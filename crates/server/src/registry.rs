//! The command registry: engine rows and server rows merged into one indexed list, with
//! case-insensitive lookup of commands and subcommands that allocates nothing.

use std::collections::HashMap;

use hotkv_engine::CommandError;
use hotkv_engine::cmd::{self as ecmd, EngineCmd};
use hotkv_engine::command::{ArgSpec, CommandSpec, InvalidKeyArgs, KeySpec, KeysFound, for_each_key};
use hotkv_protocol::{Args, ReplyBuf};

use crate::server::Server;
use crate::session::Session;

/// What a command asks the connection to do after its reply.
pub enum Flow {
    /// Carry on.
    Continue,
    /// Close once the reply is written (QUIT, CLIENT KILL of oneself).
    Close,
    /// Shut the server down once the reply is written.
    Shutdown,
    /// The client is blocked (BLPOP without data): wait for the wakeup before going on.
    Block(crate::blocking::BlockWait),
    /// CLIENT PAUSE holds this command (its arguments) back: run it when the pause ends.
    Paused(Vec<Vec<u8>>),
    /// The command waits on another node (MIGRATE): perform the request with no lock held,
    /// then run the command's second turn.
    Remote(Box<crate::dispatch::RemoteWait>),
    /// The reply comes from a future the connection awaits with no lock held (WAIT): its
    /// bytes are written in the command's place, and the connection goes on.
    Await(std::pin::Pin<Box<dyn std::future::Future<Output = Vec<u8>> + Send>>),
    /// The connection becomes a replica's session (PSYNC/SYNC) for the rest of its life.
    Replica(Box<crate::replication::SyncStart>),
    /// An EVAL to run under the Lua debugger (its arguments): the connection hands its
    /// socket to the debugging session, runs the script, and closes after its reply.
    Debug(Vec<Vec<u8>>),
}

impl std::fmt::Debug for Flow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Flow::Continue => "Continue",
            Flow::Close => "Close",
            Flow::Shutdown => "Shutdown",
            Flow::Block(_) => "Block",
            Flow::Paused(_) => "Paused",
            Flow::Remote(_) => "Remote",
            Flow::Await(_) => "Await",
            Flow::Replica(_) => "Replica",
            Flow::Debug(_) => "Debug",
        })
    }
}

/// Flows compare by kind; two blocks are never equal (each is its own registration).
impl PartialEq for Flow {
    fn eq(&self, other: &Flow) -> bool {
        matches!(
            (self, other),
            (Flow::Continue, Flow::Continue) | (Flow::Close, Flow::Close) | (Flow::Shutdown, Flow::Shutdown)
        )
    }
}

impl Flow {
    /// Whether the connection simply carries on.
    pub fn is_continue(&self) -> bool {
        matches!(self, Flow::Continue)
    }
}

/// A server command handler.
pub type ServerFn = fn(&Server, &mut Session, Args<'_>, &mut ReplyBuf) -> Result<Flow, CommandError>;

/// A row of a server command.
pub type ServerSpec = CommandSpec<ServerFn>;

/// Who implements a command.
#[derive(Clone, Copy)]
pub enum Spec {
    /// A data command in the engine.
    Engine(&'static ecmd::Spec),
    /// A command of the server crate.
    Server(&'static ServerSpec),
}

macro_rules! delegate {
    ($($field:ident: $ty:ty),*) => {
        $(
            /// Metadata field of the row.
            pub fn $field(&self) -> $ty {
                match self {
                    Spec::Engine(s) => s.$field,
                    Spec::Server(s) => s.$field,
                }
            }
        )*
    };
}

impl Spec {
    delegate!(name: &'static str, arity: i32, flags: u32, key_specs: &'static [KeySpec],
        tips: &'static [&'static str], group: &'static str, since: &'static str,
        summary: &'static str, complexity: &'static str, args: &'static [ArgSpec]);

    /// ACL categories including derived ones.
    pub fn effective_acl(&self) -> u32 {
        match self {
            Spec::Engine(s) => s.effective_acl(),
            Spec::Server(s) => s.effective_acl(),
        }
    }

    /// Reports the key arguments of a call with their key-spec flags (channels are not keys
    /// here): the engine's one key-extraction function, for COMMAND GETKEYS.
    pub fn for_each_key(&self, args: &Args<'_>, found: impl FnMut(usize, u32)) -> Result<KeysFound, InvalidKeyArgs> {
        match self {
            Spec::Engine(s) => for_each_key(*s, args, false, found),
            Spec::Server(s) => for_each_key(*s, args, false, found),
        }
    }

    /// The engine handler, for data commands.
    pub fn engine(&self) -> Option<&'static EngineCmd> {
        match self {
            Spec::Engine(s) => s.handler.as_ref(),
            Spec::Server(_) => None,
        }
    }

    /// The server handler.
    pub fn server(&self) -> Option<ServerFn> {
        match self {
            Spec::Server(s) => s.handler,
            Spec::Engine(_) => None,
        }
    }
}

/// One registered command or subcommand.
pub struct Command {
    /// Index in the registry (also the commandstats slot).
    pub id: usize,
    /// `get`, or `config|get` for a subcommand.
    pub full_name: String,
    /// The container, for a subcommand.
    pub parent: Option<usize>,
    /// Subcommands, for a container.
    pub subs: Vec<usize>,
    /// Metadata and handler.
    pub spec: Spec,
}

/// The outcome of looking up a call.
pub enum Lookup {
    /// The command (or subcommand) to run.
    Found(usize),
    /// No such command.
    Unknown,
    /// A container command called with an unknown subcommand.
    UnknownSub(usize),
}

/// All commands.
pub struct Registry {
    cmds: Vec<Command>,
    // foldhash: command names are not attacker-chosen keys, and SipHash showed in profiles.
    top: HashMap<Box<[u8]>, usize, FixedState>,
    /// The names clients call commands by: `top` after `rename-command`. The server's own
    /// lookups ([`Registry::by_name`]) keep the original names, as Valkey's `orig_commands`.
    visible: HashMap<Box<[u8]>, usize, FixedState>,
    subs: HashMap<(usize, Box<[u8]>), usize, FixedState>,
}

type FixedState = foldhash::fast::FixedState;

impl Registry {
    /// Builds the registry from the engine's and the server's rows.
    pub fn new(server_rows: impl Iterator<Item = &'static ServerSpec>) -> Registry {
        let mut r = Registry {
            cmds: Vec::new(),
            top: HashMap::default(),
            visible: HashMap::default(),
            subs: HashMap::default(),
        };
        for s in ecmd::commands() {
            let subs: Vec<Spec> = s.subcommands.iter().map(Spec::Engine).collect();
            r.add(Spec::Engine(s), subs);
        }
        for s in server_rows {
            let subs: Vec<Spec> = s.subcommands.iter().map(Spec::Server).collect();
            r.add(Spec::Server(s), subs);
        }
        r.visible = r.top.clone();
        r
    }

    /// `rename-command old new`: clients call `old` as `new` from now on, and `old` is unknown;
    /// an empty `new` removes the command. The errors are Valkey's texts.
    pub fn rename(&mut self, old: &str, new: &str) -> Result<(), &'static str> {
        let Some(id) = self.visible.remove(old.to_ascii_lowercase().as_bytes()) else {
            return Err("No such command in rename-command");
        };
        if new.is_empty() {
            return Ok(());
        }
        let new: Box<[u8]> = new.to_ascii_lowercase().into_bytes().into();
        if self.visible.contains_key(&new) {
            self.visible.insert(old.to_ascii_lowercase().into_bytes().into(), id);
            return Err("Target command name already exists");
        }
        self.visible.insert(new, id);
        Ok(())
    }

    /// Adds a command; a container already registered by the other owner gains the new
    /// subcommands (MEMORY: USAGE is the engine's, STATS the server's).
    fn add(&mut self, spec: Spec, subs: Vec<Spec>) {
        let id = match self.top.get(spec.name().as_bytes()) {
            Some(&existing) => {
                assert!(!subs.is_empty() && !self.cmds[existing].subs.is_empty(), "duplicate command {}", spec.name());
                existing
            }
            None => {
                let id = self.cmds.len();
                self.top.insert(spec.name().as_bytes().into(), id);
                self.cmds.push(Command {
                    id,
                    full_name: spec.name().to_string(),
                    parent: None,
                    subs: Vec::new(),
                    spec,
                });
                id
            }
        };
        let spec = self.cmds[id].spec;
        for sub in subs {
            let sid = self.cmds.len();
            assert!(
                self.subs.insert((id, sub.name().as_bytes().into()), sid).is_none(),
                "duplicate subcommand {}|{}",
                spec.name(),
                sub.name()
            );
            self.cmds.push(Command {
                id: sid,
                full_name: format!("{}|{}", spec.name(), sub.name()),
                parent: Some(id),
                subs: Vec::new(),
                spec: sub,
            });
            self.cmds[id].subs.push(sid);
        }
    }

    /// Finds the command a call names.
    pub fn lookup(&self, args: &Args<'_>) -> Lookup {
        let mut buf = [0u8; 64];
        let Some(name) = lower(args.get(0), &mut buf) else { return Lookup::Unknown };
        let Some(&id) = self.visible.get(name) else { return Lookup::Unknown };
        if self.cmds[id].subs.is_empty() || args.len() < 2 {
            return Lookup::Found(id);
        }
        let mut buf = [0u8; 64];
        match lower(args.get(1), &mut buf).and_then(|sub| self.subs.get(&(id, Box::from(sub)))) {
            Some(&sid) => Lookup::Found(sid),
            None => Lookup::UnknownSub(id),
        }
    }

    /// Finds a command by (lower- or upper-case) name, `config|get` style for subcommands.
    pub fn by_name(&self, name: &str) -> Option<usize> {
        let name = name.to_ascii_lowercase();
        match name.split_once('|') {
            None => self.top.get(name.as_bytes()).copied(),
            Some((c, s)) => {
                let id = *self.top.get(c.as_bytes())?;
                self.subs.get(&(id, Box::from(s.as_bytes()))).copied()
            }
        }
    }

    /// Command `id`.
    pub fn get(&self, id: usize) -> &Command {
        &self.cmds[id]
    }

    /// Number of registered commands and subcommands.
    pub fn len(&self) -> usize {
        self.cmds.len()
    }

    /// Whether nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.cmds.is_empty()
    }

    /// Top-level commands in registration order.
    pub fn top_level(&self) -> impl Iterator<Item = &Command> {
        self.cmds.iter().filter(|c| c.parent.is_none())
    }

    /// All commands and subcommands.
    pub fn all(&self) -> impl Iterator<Item = &Command> {
        self.cmds.iter()
    }

    /// The error for an unknown command or subcommand.
    pub fn unknown_error(&self, lookup: &Lookup, args: &Args<'_>) -> CommandError {
        match lookup {
            Lookup::UnknownSub(id) => CommandError::UnknownSubcommand {
                sub: String::from_utf8_lossy(&args.get(1)[..args.get(1).len().min(128)]).into_owned(),
                container: self.cmds[*id].full_name.to_ascii_uppercase(),
            },
            _ => CommandError::unknown_command(args.get(0), args.iter().skip(1)),
        }
    }
}

fn lower<'b>(name: &[u8], buf: &'b mut [u8; 64]) -> Option<&'b [u8]> {
    if name.len() > buf.len() {
        return None;
    }
    let out = &mut buf[..name.len()];
    for (o, c) in out.iter_mut().zip(name) {
        *o = c.to_ascii_lowercase();
    }
    Some(out)
}
