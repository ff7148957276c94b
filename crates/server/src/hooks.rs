//! What happens after CONFIG SET changes a directive: one function per [`Hook`], run once per
//! CONFIG SET for all the directives that share it. A hook that fails makes CONFIG SET put
//! every value back.

use std::sync::Arc;

use crate::config::Settings;
use crate::config::table::{self, Hook};
use crate::listener;
use crate::log::{self, LogLevel};
use crate::server::Server;

/// Applies `hook` for the change from `old` to `new` (already installed in `srv`).
pub fn apply(srv: &Server, hook: Hook, old: &Settings, new: &Settings) -> Result<(), String> {
    match hook {
        // Engine settings, runtime limits and the memory limit are rebuilt from the installed
        // settings by `Server::install_settings`; nothing else to do.
        Hook::Engine | Hook::Clients | Hook::Maxmemory => Ok(()),
        Hook::Logging => {
            log::set_level(LogLevel::parse(new.str(table::LOGLEVEL)));
            Ok(())
        }
        Hook::Listeners => rebind(srv, old, new),
        Hook::WorkingDir => std::env::set_current_dir(new.str(table::DIR))
            .map_err(|e| crate::config::os_reason(&e)),
        // These subsystems arrive with their issues; their directives are marked no-effect.
        Hook::Tls | Hook::Cluster | Hook::Replication => Ok(()),
    }
}

fn rebind(srv: &Server, old: &Settings, new: &Settings) -> Result<(), String> {
    let (old_bind, new_bind) = (old.list(table::BIND), new.list(table::BIND));
    let (old_port, new_port) = (old.int(table::PORT) as u16, new.int(table::PORT) as u16);
    if old_bind == new_bind && old_port == new_port {
        return Ok(());
    }
    let Some(arc): Option<Arc<Server>> = srv.arc() else {
        return Err("server is not running".into());
    };
    listener::rebind(&arc, (old_bind, old_port), (new_bind, new_port), new.int(table::TCP_BACKLOG) as i32).map_err(
        |reason| {
            // Valkey logs the system's reason and answers with a pointer to the log.
            tracing::warn!("{reason}");
            "Unable to listen on this port. Check server logs.".to_string()
        },
    )
}
