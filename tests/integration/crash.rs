//! Crash reports, as Valkey's `integration/logging.tcl` expects them: a fatal signal, DEBUG
//! SEGFAULT and DEBUG ASSERT leave a bug report with the stack in the log and end the process
//! the conventional way; SIGALRM and the software watchdog log stacks and the server carries
//! on; a panic inside one client's command is reported and costs only that connection.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use hotkv_test_support::{Frame, SIGABRT, SIGALRM, SIGSEGV, TestServer};

use crate::{ok, server_with};

const WAIT: Duration = Duration::from_secs(20);

fn debug_server(extra: &[(&str, &str)]) -> TestServer {
    let mut overrides = vec![("enable-debug-command", "yes")];
    overrides.extend_from_slice(extra);
    server_with(&overrides)
}

/// Asserts that the log holds one complete bug report with a stack trace.
#[track_caller]
fn assert_one_report(srv: &TestServer) {
    let log = srv.log();
    assert_eq!(log.matches("BUG REPORT START").count(), 1, "{log}");
    assert!(log.contains("------ STACK TRACE ------") && log.contains("------ STACK TRACE DONE ------"), "{log}");
    assert!(log.contains("BUG REPORT END"), "{log}");
}

#[test]
fn debug_segfault_reports_the_signal_and_dies_by_it() {
    let mut srv = debug_server(&[]);
    let mut c = srv.client();
    c.send(&["DEBUG", "SEGFAULT"]);
    let status = srv.wait_exit(WAIT).expect("the server survived DEBUG SEGFAULT");
    assert_eq!(status.signal(), Some(SIGSEGV), "{status}");
    let log = srv.log();
    assert!(log.contains("crashed by signal: 11"), "{log}");
    assert!(log.contains("Accessing address: 0x") && log.contains("Crashed running the instruction at: 0x"), "{log}");
    // Symbol names come from the exported dynamic symbol table (-rdynamic).
    assert!(log.contains("hotkv_server3cmd5debug"), "the DEBUG handler is not named in the stack:\n{log}");
    assert_one_report(&srv);
}

#[test]
fn sigabrt_from_outside_reports_the_thread_running_a_command() {
    let mut srv = debug_server(&[("loglevel", "verbose")]);
    let mut sleeper = srv.client();
    sleeper.send(&["DEBUG", "SLEEP", "60"]);
    assert!(srv.wait_for_log("DEBUG SLEEP: the server stops", WAIT), "{}", srv.log());
    srv.signal(SIGABRT);
    let status = srv.wait_exit(WAIT).expect("the server survived SIGABRT");
    assert_eq!(status.signal(), Some(SIGABRT), "{status}");
    let log = srv.log();
    assert!(log.contains("crashed by signal: 6") && log.contains("Killed by PID: "), "{log}");
    // The kernel picks any thread for a signal to the process; the sleeping one shows too.
    assert!(log.contains("--- STACK OF A THREAD RUNNING A COMMAND ---"), "{log}");
    assert!(log.contains("hotkv_server3cmd5debug"), "{log}");
    assert_one_report(&srv);
}

#[test]
fn crash_log_disabled_leaves_the_signal_alone() {
    let mut srv = debug_server(&[("crash-log-enabled", "no")]);
    srv.client().send(&["DEBUG", "SEGFAULT"]);
    let status = srv.wait_exit(WAIT).expect("the server survived DEBUG SEGFAULT");
    assert_eq!(status.signal(), Some(SIGSEGV), "{status}");
    assert!(!srv.log().contains("crashed by signal"), "{}", srv.log());
}

#[test]
fn debug_assert_reports_the_assertion_and_aborts() {
    let mut srv = debug_server(&[]);
    srv.client().send(&["DEBUG", "ASSERT"]);
    let status = srv.wait_exit(WAIT).expect("the server survived DEBUG ASSERT");
    assert_eq!(status.signal(), Some(SIGABRT), "{status}");
    let log = srv.log();
    assert!(log.contains("=== ASSERTION FAILED ===") && log.contains("'1 == 2' is not true"), "{log}");
    assert!(log.contains("hotkv_server::cmd::debug::run"), "{log}");
    // abort() after the report does not report a second time.
    assert!(!log.contains("crashed by signal"), "{log}");
    assert_one_report(&srv);
}

#[test]
fn use_exit_on_panic_exits_1_after_the_report() {
    let mut srv = debug_server(&[]);
    ok(&mut srv.client(), &["CONFIG", "SET", "use-exit-on-panic", "yes"]);
    srv.client().send(&["DEBUG", "ASSERT"]);
    let status = srv.wait_exit(WAIT).expect("the server survived DEBUG ASSERT");
    assert_eq!(status.code(), Some(1), "{status}");
    assert!(srv.log().contains("=== ASSERTION FAILED ==="), "{}", srv.log());
    assert_one_report(&srv);
}

#[test]
fn sigalrm_logs_stacks_and_the_server_carries_on() {
    let mut srv = debug_server(&[("loglevel", "verbose")]);
    let mut sleeper = srv.client();
    sleeper.send(&["DEBUG", "SLEEP", "60"]);
    assert!(srv.wait_for_log("DEBUG SLEEP: the server stops", WAIT), "{}", srv.log());
    srv.signal(SIGALRM);
    assert!(srv.wait_for_log("Received SIGALRM", WAIT), "{}", srv.log());
    // As Valkey's nanosleep, the sleep ends when the signal comes.
    assert_eq!(sleeper.read_frame(), Frame::ok());
    assert_eq!(sleeper.cmd(&["PING"]), Frame::simple("PONG"));
    assert!(srv.is_running());
    let log = srv.log();
    assert!(log.contains("--- STACK OF A THREAD RUNNING A COMMAND ---"), "{log}");
    assert!(!log.contains("BUG REPORT"), "{log}");
}

#[test]
fn the_watchdog_reports_a_command_that_runs_too_long() {
    let srv = debug_server(&[]);
    let mut c = srv.client();
    ok(&mut c, &["CONFIG", "SET", "watchdog-period", "200"]);
    // Ends when the watchdog's signal comes, long before 60 s.
    c.send(&["DEBUG", "SLEEP", "60"]);
    assert!(srv.wait_for_log("--- WATCHDOG TIMER EXPIRED ---", WAIT), "{}", srv.log());
    assert_eq!(c.read_frame(), Frame::ok());
    assert!(srv.log().contains("hotkv_server3cmd5debug"), "{}", srv.log());
    ok(&mut c, &["CONFIG", "SET", "watchdog-period", "0"]);
    assert_eq!(c.cmd(&["PING"]), Frame::simple("PONG"));
}

/// A client moves to a task of its own while a command of its waits, and back to an event
/// loop once it only runs commands again: the thread a later command runs on, which a panic
/// report names, says where it is.
#[test]
fn a_client_served_after_blocking_is_back_on_an_event_loop() {
    let srv = debug_server(&[]);
    let mut c = srv.client();
    c.send(&["BLPOP", "q", "20"]);
    let blocked = || crate::info_num(&crate::info(&mut srv.client(), "clients"), "blocked_clients") == 1;
    assert!(hotkv_test_support::wait_for(blocked, WAIT));
    assert_eq!(srv.cmd(&["RPUSH", "q", "x"]), Frame::Integer(1));
    assert_eq!(c.read_frame(), Frame::Array(vec![Frame::bulk("q"), Frame::bulk("x")]));
    assert_eq!(c.cmd(&["PING"]), Frame::simple("PONG"));
    c.send(&["DEBUG", "CLIENT-PANIC"]);
    assert!(c.closed_within(WAIT), "the panicking connection stayed open");
    assert!(srv.wait_for_log("STACK TRACE DONE", WAIT), "{}", srv.log());
    let log = srv.log();
    assert!(log.contains("=== PANIC === thread 'hotkv-loop-"), "{log}");
    assert_eq!(srv.cmd(&["PING"]), Frame::simple("PONG"));
}

#[test]
fn a_panic_in_a_command_is_reported_and_the_server_lives() {
    let mut srv = debug_server(&[]);
    let mut victim = srv.client();
    victim.send(&["DEBUG", "CLIENT-PANIC"]);
    assert!(victim.closed_within(WAIT), "the panicking connection stayed open");
    assert!(srv.wait_for_log("STACK TRACE DONE", WAIT), "{}", srv.log());
    let log = srv.log();
    assert!(
        // A plain client's commands run on its event loop's thread.
        log.contains("=== PANIC === thread 'hotkv-loop-") && log.contains("DEBUG CLIENT-PANIC"),
        "{log}"
    );
    assert!(log.contains("hotkv_server::cmd::debug::run"), "{log}");
    assert!(!log.contains("BUG REPORT"), "{log}");
    assert_eq!(srv.cmd(&["PING"]), Frame::simple("PONG"));
    assert!(srv.is_running());
}
