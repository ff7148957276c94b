//! What happens after CONFIG SET changes a directive: one function per [`Hook`], run once per
//! CONFIG SET for all the directives that share it. A hook that fails makes CONFIG SET put
//! every value back.

use std::fmt;
use std::sync::Arc;

use crate::config::Settings;
use crate::config::table::{self, Hook};
use crate::listener;
use crate::log::{self, LogLevel};
use crate::server::Server;

/// Why a hook failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookError {
    /// A reason CONFIG SET wraps in Valkey's "CONFIG SET failed (possibly related to ...)".
    Reason(String),
    /// The whole error reply, as Valkey words it for this subsystem (TLS reloads).
    Reply(String),
}

impl fmt::Display for HookError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HookError::Reason(s) | HookError::Reply(s) => f.write_str(s),
        }
    }
}

/// Applies `hook` for the change from `old` to `new` (already installed in `srv`).
pub fn apply(srv: &Server, hook: Hook, old: &Settings, new: &Settings) -> Result<(), HookError> {
    match hook {
        // Engine settings, runtime limits and the memory limit are rebuilt from the installed
        // settings by `Server::install_settings`; nothing else to do.
        Hook::Engine | Hook::Clients => Ok(()),
        // The eviction a lower limit calls for runs after every hook succeeded (CONFIG SET).
        Hook::Maxmemory => {
            crate::evict::warn_below_usage(srv);
            Ok(())
        }
        Hook::Logging => {
            log::set_level(LogLevel::parse(new.str(table::LOGLEVEL)));
            Ok(())
        }
        Hook::Listeners => rebind(srv, old, new),
        Hook::WorkingDir => {
            std::env::set_current_dir(new.str(table::DIR)).map_err(|e| HookError::Reason(crate::config::os_reason(&e)))
        }
        Hook::Tls => crate::tls::apply(&srv.tls, new).map_err(|e| HookError::Reply(e.config_set_reply())),
        Hook::TlsLive => crate::tls::apply_live(&srv.tls, new).map_err(|e| HookError::Reason(e.to_string())),
        Hook::Cluster => {
            crate::cluster::apply(srv, new);
            Ok(())
        }
        Hook::Aof => crate::aof::wire::apply_config(srv, new).map_err(HookError::Reason),
        Hook::Crash => {
            crate::crash::configure(new);
            Ok(())
        }
        Hook::Acl => {
            if old.str(table::REQUIREPASS) != new.str(table::REQUIREPASS) {
                srv.acl.apply_requirepass(&srv.registry, new);
            }
            Ok(())
        }
        Hook::Replication => {
            crate::replication::apply(srv, new);
            // A failover's data-age check allows for one repl-ping-replica-period.
            crate::cluster::apply(srv, new);
            Ok(())
        }
    }
}

fn rebind(srv: &Server, old: &Settings, new: &Settings) -> Result<(), HookError> {
    let Some(arc): Option<Arc<Server>> = srv.arc() else {
        return Err(HookError::Reason("server is not running".into()));
    };
    let backlog = new.int(table::TCP_BACKLOG) as i32;
    let ports = |s: &Settings| [(false, s.int(table::PORT) as u16), (true, s.int(table::TLS_PORT) as u16)];
    let (old_bind, new_bind) = (old.list(table::BIND), new.list(table::BIND));
    let mut done: Vec<(bool, u16, u16)> = Vec::new();
    for ((tls, old_port), (_, new_port)) in ports(old).into_iter().zip(ports(new)) {
        if old_bind == new_bind && old_port == new_port {
            continue;
        }
        let result = if tls && new_port != 0 && srv.tls.state().is_none() {
            // The first TLS port needs the TLS material loaded.
            crate::tls::apply(&srv.tls, new).map_err(|e| HookError::Reply(e.config_set_reply()))
        } else {
            Ok(())
        };
        let result = result.and_then(|()| {
            listener::rebind(&arc, tls, (old_bind, old_port), (new_bind, new_port), backlog).map_err(|reason| {
                // Valkey logs the system's reason and answers with a pointer to the log, or,
                // when the addresses changed, says so (applyBind vs updatePort).
                tracing::warn!("{reason}");
                HookError::Reason(if old_bind != new_bind {
                    "Failed to bind to specified addresses.".to_string()
                } else {
                    "Unable to listen on this port. Check server logs.".to_string()
                })
            })
        });
        if let Err(e) = result {
            // All or nothing: the port already moved goes back.
            for (tls, old_port, new_port) in done {
                let _ = listener::rebind(&arc, tls, (new_bind, new_port), (old_bind, old_port), backlog);
            }
            return Err(e);
        }
        done.push((tls, old_port, new_port));
    }
    Ok(())
}
