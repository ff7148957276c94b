//! Runs server commands in unit tests through the real dispatcher, against a real `Server`
//! with the full registry, without sockets.

use std::net::SocketAddr;
use std::sync::Arc;

use hotkv_protocol::{Args, ReplyBuf};

use crate::dispatch::{Batch, Scratch, dispatch};
use crate::registry::{Flow, Registry};
use crate::server::{Server, unix_ms};
use crate::session::{ClientInfo, Session};

/// A connected client of a test server.
pub(crate) struct TestClient {
    /// Its session.
    pub sess: Session,
    /// Its output buffer (holds the protocol version).
    pub out: ReplyBuf,
    scratch: Scratch,
}

/// Calls `f` with `argv` as command arguments.
pub(crate) fn with_args<R>(argv: &[&str], f: impl FnOnce(Args<'_>) -> R) -> R {
    let mut buf = Vec::new();
    let mut spans = Vec::new();
    for a in argv {
        spans.push((buf.len(), buf.len() + a.len()));
        buf.extend_from_slice(a.as_bytes());
    }
    f(Args::from_parts(&buf, &spans))
}

/// A server with the default settings.
pub(crate) fn server() -> Arc<Server> {
    Arc::new(Server::new(crate::default_settings(), None, Registry::new(super::commands())))
}

/// A server with the default settings whose cluster routing is `router`.
pub(crate) fn server_with_router(router: Arc<dyn hotkv_engine::route::SlotRouter>) -> Arc<Server> {
    let mut srv = Server::new(crate::default_settings(), None, Registry::new(super::commands()));
    srv.router = router;
    Arc::new(srv)
}

/// Registers a client connected from `127.0.0.1:port` to `127.0.0.1:6379`.
pub(crate) fn client(srv: &Server, port: u16) -> TestClient {
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().expect("valid test address");
    let laddr: SocketAddr = "127.0.0.1:6379".parse().expect("valid test address");
    let info = Arc::new(ClientInfo::new(srv.clients.next_id(), addr, laddr, 8, unix_ms()));
    srv.clients.add(info.clone());
    let mut sess = Session::new(info, true);
    sess.acl_user = Some(srv.acl.default_user());
    TestClient { sess, out: ReplyBuf::new(), scratch: Scratch::default() }
}

impl TestClient {
    /// Runs one command; returns the raw reply and the flow.
    pub(crate) fn run_flow(&mut self, srv: &Server, argv: &[&str]) -> (String, Flow) {
        let engine = srv.engine.load();
        let rt = srv.rt.load();
        let batch = Batch { srv, engine: &engine, rt: &rt, now_ms: unix_ms() };
        self.out.truncate(0);
        let flow = with_args(argv, |args| dispatch(&batch, &mut self.sess, args, &mut self.out, &mut self.scratch));
        srv.stats.absorb(&mut self.sess.local, 0, 0);
        (String::from_utf8_lossy(self.out.as_bytes()).into_owned(), flow)
    }

    /// Runs one command; returns the raw reply.
    pub(crate) fn run(&mut self, srv: &Server, argv: &[&str]) -> String {
        self.run_flow(srv, argv).0
    }
}
