//! Crash reports, as Valkey's `debug.c`: a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL,
//! SIGABRT), an assertion (DEBUG ASSERT) or a panic outside a client's connection writes a
//! report to the log between `BUG REPORT START` and `BUG REPORT END` (what happened, the
//! stack of the thread it happened on) and the process ends the conventional way: killed by
//! the same signal, or by SIGABRT after an assertion (`exit(1)` with `use-exit-on-panic`).
//! SIGALRM (sent by hand, or by the software watchdog, [`crate::watchdog`]) is not fatal: it
//! logs the stacks of the threads running a command and the server carries on.
//!
//! The signal handlers run on the thread's alternate signal stack (so a stack overflow is
//! reported too) and are async-signal-safe: they format into stack buffers and write them
//! with write(2) to the log's descriptor, and take the stack with glibc's `backtrace()` and
//! `backtrace_symbols_fd()`, which write straight to the descriptor without allocating once
//! `backtrace()` has run once (done at [`install`]; its first call loads libgcc). Symbol names
//! come from the dynamic symbol table, which the binary exports for this (`-rdynamic`, see the
//! root `build.rs`); frames without a name show the module offset, for `addr2line`. Neither
//! `std::backtrace` nor the `backtrace` crate is used in a handler: both allocate and take
//! locks while resolving symbols, and the crash may have happened inside the allocator.
//! A panic is not a signal: its hook runs in ordinary code, so it takes a symbolized
//! `std::backtrace::Backtrace`.
//!
//! `crash-log-enabled no` leaves the fatal signals to their default action (a core dump);
//! `crash-memcheck-enabled` is accepted but hotkv runs no memory test after a crash.

use std::cell::Cell;
use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

use crate::config::Settings;
use crate::config::table;

/// What DEBUG ASSERT panics with: the hook turns it into Valkey's `ASSERTION FAILED` report
/// and ends the process, wherever it was raised.
#[derive(Debug)]
pub struct Assertion {
    /// The condition that did not hold.
    pub expr: &'static str,
    /// Where it was checked.
    pub file: &'static str,
    /// The line.
    pub line: u32,
}

/// Installs the handlers and the panic hook once the log is open, and applies the crash
/// directives. Called once, by the binary.
pub fn install(settings: &Settings) {
    warm_up_backtrace();
    alt_stack_for_this_thread();
    std::panic::set_hook(Box::new(on_panic));
    sys::set_handler(
        libc::SIGALRM,
        on_alarm as *const () as usize,
        libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART,
    );
    configure(settings);
}

/// Applies `crash-log-enabled`, `use-exit-on-panic` and `watchdog-period` (their CONFIG SET
/// hook too).
pub fn configure(settings: &Settings) {
    let enabled = settings.bool(table::CRASH_LOG_ENABLED);
    if enabled != CRASH_LOG.swap(enabled, Ordering::Relaxed) || enabled {
        set_fatal_handlers(enabled);
    }
    EXIT_ON_PANIC.store(settings.bool(table::USE_EXIT_ON_PANIC), Ordering::Relaxed);
    crate::watchdog::set_period(settings.int(table::WATCHDOG_PERIOD).max(0) as u64);
}

/// How many SIGALRMs this process has handled: DEBUG SLEEP ends early when one arrives, as
/// Valkey's nanosleep does when the signal interrupts it.
pub fn alarms() -> u64 {
    ALARMS.load(Ordering::Relaxed)
}

/// DEBUG SEGFAULT: writes to a read-only page, as Valkey does, so the report is that of a
/// real invalid access (signal 11, the address, the instruction).
pub fn segfault() -> ! {
    sys::segfault()
}

/// Runs `f` as a client's connection: a panic inside it is caught at the connection's
/// boundary and costs only that connection, so the hook reports it without ending the
/// process. Any other panic ends the process after its report.
pub fn in_connection<T>(f: impl FnOnce() -> T) -> T {
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            IN_CONNECTION.with(|c| c.set(c.get() - 1));
        }
    }
    IN_CONNECTION.with(|c| c.set(c.get() + 1));
    let _leave = Leave;
    f()
}

/// Gives the calling thread an alternate signal stack large enough for the report (the one
/// std gives its threads is sized for its own one-line message). Runtime threads call it when
/// they start and [`release_alt_stack`] when they stop.
pub fn alt_stack_for_this_thread() {
    sys::alt_stack(true);
}

/// Takes back the stack [`alt_stack_for_this_thread`] gave.
pub fn release_alt_stack() {
    sys::alt_stack(false);
}

/// The watchdog found thread `tid` in one command for longer than `watchdog-period`: signals
/// it, so that its handler logs `WATCHDOG TIMER EXPIRED` with its stack.
pub(crate) fn watchdog_expired(tid: i32) {
    WATCHDOG_TARGET.store(tid, Ordering::SeqCst);
    sys::signal_thread(tid, libc::SIGALRM);
}

thread_local! {
    /// How deep this thread is in [`in_connection`].
    static IN_CONNECTION: Cell<u32> = const { Cell::new(0) };
}

/// `crash-log-enabled`.
static CRASH_LOG: AtomicBool = AtomicBool::new(false);
/// `use-exit-on-panic`.
static EXIT_ON_PANIC: AtomicBool = AtomicBool::new(false);
/// SIGALRMs handled.
static ALARMS: AtomicU64 = AtomicU64::new(0);
/// The thread the watchdog signalled (0: none pending).
static WATCHDOG_TARGET: AtomicI32 = AtomicI32::new(0);
/// The thread writing the fatal report (0: none): a second fatal signal on it is a crash in
/// the report; on another thread, a crash the first report will end the process for.
static REPORTING: AtomicI32 = AtomicI32::new(0);
/// The thread writing a SIGALRM trace (0: none), so traces of several threads do not mix.
static TRACING: AtomicI32 = AtomicI32::new(0);
/// Stacks asked of busy threads and not written yet.
static PENDING: AtomicI32 = AtomicI32::new(0);
/// Whether `BUG REPORT START` was written.
static REPORT_STARTED: AtomicBool = AtomicBool::new(false);

/// The fatal signals the report covers, as Valkey's `setupSigSegvHandler`.
const FATAL: [libc::c_int; 5] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGFPE, libc::SIGILL, libc::SIGABRT];
/// Frames taken per stack.
const MAX_FRAMES: usize = 100;

fn set_fatal_handlers(enabled: bool) {
    for sig in FATAL {
        if enabled {
            // SA_NODEFER: a fault inside the handler reaches it again (and is recognised),
            // instead of hanging on a blocked signal.
            sys::set_handler(
                sig,
                on_fatal as *const () as usize,
                libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER,
            );
        } else {
            sys::set_handler(sig, libc::SIG_DFL, 0);
        }
    }
}

/// The handler of the fatal signals.
extern "C" fn on_fatal(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let tid = sys::gettid();
    if let Err(owner) = REPORTING.compare_exchange(0, tid, Ordering::SeqCst, Ordering::SeqCst) {
        if owner == tid {
            let mut out = Out::new();
            out.line(format_args!("Crashed running the crash report (signal {sig}); giving up on it."));
            sys::die(sig);
        }
        // Another thread is writing its report and will end the process.
        loop {
            sys::pause();
        }
    }
    let mut out = Out::new();
    report_start(&mut out);
    let (code, addr, pid, uid) = sys::siginfo(info);
    out.line(format_args!("hotkv {} crashed by signal: {sig}, si_code: {code}", crate::VERSION));
    if sig == libc::SIGSEGV || sig == libc::SIGBUS {
        out.line(format_args!("Accessing address: {addr:#x}"));
    }
    if code == libc::SI_USER && pid != -1 {
        out.line(format_args!("Killed by PID: {pid}, UID: {uid}"));
    }
    let pc = sys::program_counter(ctx);
    if pc != 0 {
        out.line(format_args!("Crashed running the instruction at: {pc:#x}"));
    }
    stack_trace(&mut out, pc);
    // Killed from outside (Valkey's test sends SIGABRT during a DEBUG SLEEP), the thread the
    // kernel picked is seldom the one in a command: its stack belongs in the report too.
    show_busy_threads(tid);
    report_end(&mut out);
    sys::die(sig);
}

/// Has every other thread in a command log its stack (through SIGALRM, marked as forwarded)
/// and waits, a bounded while, until they have.
fn show_busy_threads(me: i32) {
    // A thread that ended before writing its stack must not keep later reports waiting.
    PENDING.store(0, Ordering::SeqCst);
    crate::watchdog::forward_to_busy(me, |t| {
        PENDING.fetch_add(1, Ordering::SeqCst);
        sys::signal_thread(t, libc::SIGALRM);
    });
    for _ in 0..200 {
        if PENDING.load(Ordering::SeqCst) <= 0 {
            return;
        }
        sys::nap_ms(10);
    }
}

/// The handler of SIGALRM: the watchdog's, or one sent from outside; never fatal.
extern "C" fn on_alarm(_sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let errno = sys::errno();
    let tid = sys::gettid();
    let watchdog = WATCHDOG_TARGET.compare_exchange(tid, 0, Ordering::SeqCst, Ordering::SeqCst).is_ok();
    let forwarded = !watchdog && crate::watchdog::take_forwarded(tid);
    let (code, _, pid, _) = sys::siginfo(info);
    // A SIGALRM this process sent itself that is neither of those is not asking for stacks.
    let own = code == libc::SI_TKILL && pid == sys::getpid();
    let from_outside = !(watchdog || forwarded || own);
    lock_trace(tid);
    let mut out = Out::new();
    if watchdog {
        out.raw("\n");
        out.line(format_args!("--- WATCHDOG TIMER EXPIRED ---"));
    } else if forwarded {
        out.raw("\n");
        out.line(format_args!("--- STACK OF A THREAD RUNNING A COMMAND ---"));
    } else {
        out.raw("\n");
        out.line(format_args!("Received SIGALRM"));
    }
    stack_trace(&mut out, sys::program_counter(ctx));
    out.line(format_args!("--------\n"));
    out.flush();
    TRACING.store(0, Ordering::SeqCst);
    if forwarded {
        PENDING.fetch_sub(1, Ordering::SeqCst);
    }
    // The thread the kernel picked for a signal sent to the process is seldom the one that is
    // busy: show those too, as Valkey (one thread) shows the command it is in.
    if from_outside {
        show_busy_threads(tid);
    }
    ALARMS.fetch_add(1, Ordering::SeqCst);
    sys::set_errno(errno);
}

/// Waits (a bounded while) until no other thread is writing a SIGALRM trace.
fn lock_trace(tid: i32) {
    for _ in 0..20_000 {
        if TRACING.compare_exchange(0, tid, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            return;
        }
        sys::yield_now();
    }
}

/// The panic hook: every panic is reported in the log with its stack. One inside a client's
/// connection costs that connection (connection::serve says so next); DEBUG ASSERT, and a
/// panic anywhere else (a background task would otherwise die silently and leave the server
/// half working), end the process after a full bug report, as a Valkey assertion does.
fn on_panic(info: &std::panic::PanicHookInfo<'_>) {
    let assertion = info.payload().downcast_ref::<Assertion>();
    let fatal = assertion.is_some() || IN_CONNECTION.with(|c| c.get()) == 0;
    let location = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
    let thread = std::thread::current();
    let name = thread.name().unwrap_or("unnamed");
    // The tracing sink may be what panicked while locked: the report goes to the descriptor.
    let mut out = Out::outside_handler();
    if fatal {
        // A crash of another thread is on its way: do not interleave with its report.
        if REPORTING.compare_exchange(0, sys::gettid(), Ordering::SeqCst, Ordering::SeqCst).is_err() {
            return;
        }
        report_start(&mut out);
    }
    match assertion {
        Some(a) => {
            out.line(format_args!("=== ASSERTION FAILED ==="));
            out.line(format_args!("==> {}:{} '{}' is not true", a.file, a.line, a.expr));
        }
        None => {
            let cause = crate::connection::panic_message(info.payload());
            out.line(format_args!("=== PANIC === thread '{name}' panicked at {location}: {cause}"));
            if !fatal {
                out.line(format_args!("(while serving a client: its connection closes, the server keeps running)"));
            }
        }
    }
    out.raw("\n------ STACK TRACE ------\n");
    let _ = write!(out, "{} {} *\n{}", sys::gettid(), name, std::backtrace::Backtrace::force_capture());
    out.raw("\n------ STACK TRACE DONE ------\n");
    if !fatal {
        out.flush();
        return;
    }
    report_end(&mut out);
    // abort() must not produce a second report through the SIGABRT handler.
    set_fatal_handlers(false);
    if EXIT_ON_PANIC.load(Ordering::Relaxed) {
        sys::exit_now(1);
    }
    std::process::abort();
}

fn report_start(out: &mut Out) {
    if !REPORT_STARTED.swap(true, Ordering::SeqCst) {
        out.raw("\n\n=== HOTKV BUG REPORT START: Cut & paste starting from here ===\n");
    }
}

fn report_end(out: &mut Out) {
    out.raw(
        "\n=== HOTKV BUG REPORT END. Make sure to include from START to END. ===\n\n       Please report the \
         crash with this report, the hotkv version and how the server was started.\n\n",
    );
    out.flush();
}

/// Writes the calling thread's stack (and the instruction it stopped at, when known).
fn stack_trace(out: &mut Out, pc: usize) {
    out.raw("\n------ STACK TRACE ------\n");
    if pc != 0 {
        out.raw("EIP:\n");
        out.flush();
        sys::symbols(&[pc], out.fd);
    }
    let mut name = [0u8; 16];
    let name = sys::thread_name(&mut name);
    let _ = write!(out, "\nBacktrace:\n{} {} *\n", sys::gettid(), name);
    out.flush();
    let mut frames = [0usize; MAX_FRAMES];
    let n = sys::backtrace(&mut frames);
    sys::symbols(&frames[..n], out.fd);
    out.raw("\n------ STACK TRACE DONE ------\n");
    out.flush();
}

fn warm_up_backtrace() {
    let mut frames = [0usize; 4];
    sys::backtrace(&mut frames);
}

/// A writer to the log's descriptor through a stack buffer: formatting integers and strings
/// into it neither allocates nor locks, so signal handlers use it.
struct Out {
    fd: i32,
    buf: [u8; 1024],
    len: usize,
    /// The usual line prefix, outside signal handlers (the panic hook).
    prefix: Option<String>,
}

impl Out {
    fn new() -> Out {
        Out { fd: crate::log::raw_fd(), buf: [0; 1024], len: 0, prefix: None }
    }

    /// Lines prefixed as every log line; allocates, so not for signal handlers.
    fn outside_handler() -> Out {
        Out { prefix: Some(crate::log::prefix()), ..Out::new() }
    }

    /// One log line; in a handler in Valkey's form `<pid>:signal-handler (<unix time>) msg`.
    fn line(&mut self, msg: fmt::Arguments<'_>) {
        match self.prefix.take() {
            Some(p) => {
                self.raw(&p);
                self.prefix = Some(p);
            }
            None => {
                let _ = write!(self, "{}:signal-handler ({}) ", sys::getpid(), sys::unix_time());
            }
        }
        let _ = self.write_fmt(msg);
        self.raw("\n");
    }

    fn raw(&mut self, s: &str) {
        let _ = self.write_str(s);
    }

    fn flush(&mut self) {
        sys::write_all(self.fd, &self.buf[..self.len]);
        self.len = 0;
    }
}

impl fmt::Write for Out {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for chunk in s.as_bytes().chunks(self.buf.len()) {
            if self.len + chunk.len() > self.buf.len() {
                self.flush();
            }
            self.buf[self.len..self.len + chunk.len()].copy_from_slice(chunk);
            self.len += chunk.len();
        }
        Ok(())
    }
}

/// The system calls the report needs, each async-signal-safe.
#[allow(unsafe_code)]
mod sys {
    use std::ptr;

    /// Installs `handler` (a function address, or SIG_DFL) for `sig`.
    pub(super) fn set_handler(sig: libc::c_int, handler: usize, flags: libc::c_int) {
        // SAFETY: a zeroed sigaction is valid (empty mask); the handler is an extern "C"
        // function with the SA_SIGINFO signature, or SIG_DFL.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = handler;
            act.sa_flags = flags;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(sig, &act, ptr::null_mut());
        }
    }

    /// Ends the process with `sig`'s default action, the conventional way (status 128+sig in a
    /// shell, a core dump when enabled); `_exit` if the signal somehow does not kill.
    pub(super) fn die(sig: libc::c_int) -> ! {
        set_handler(sig, libc::SIG_DFL, 0);
        // SAFETY: plain system calls on valid arguments.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, ptr::null_mut());
            libc::raise(sig);
            libc::_exit(128 + sig)
        }
    }

    pub(super) fn exit_now(code: i32) -> ! {
        // SAFETY: _exit ends the process without running anything else.
        unsafe { libc::_exit(code) }
    }

    pub(super) fn pause() {
        // SAFETY: pause only waits for a signal.
        unsafe {
            libc::pause();
        }
    }

    pub(super) fn yield_now() {
        // SAFETY: sched_yield has no arguments.
        unsafe {
            libc::sched_yield();
        }
    }

    pub(super) fn nap_ms(ms: i64) {
        let ts = libc::timespec { tv_sec: 0, tv_nsec: (ms * 1_000_000) as libc::c_long };
        // SAFETY: nanosleep reads the timespec; an interruption only shortens the nap.
        unsafe {
            libc::nanosleep(&ts, ptr::null_mut());
        }
    }

    pub(super) fn gettid() -> i32 {
        // SAFETY: gettid has no arguments.
        unsafe { libc::gettid() }
    }

    pub(super) fn getpid() -> i32 {
        // SAFETY: getpid has no arguments.
        unsafe { libc::getpid() }
    }

    pub(super) fn unix_time() -> i64 {
        // SAFETY: time with a null pointer only returns the time.
        unsafe { libc::time(ptr::null_mut()) as i64 }
    }

    pub(super) fn errno() -> i32 {
        // SAFETY: errno's location is valid for the calling thread.
        unsafe { *libc::__errno_location() }
    }

    pub(super) fn set_errno(v: i32) {
        // SAFETY: as above.
        unsafe { *libc::__errno_location() = v }
    }

    /// Sends `sig` to thread `tid` of this process.
    pub(super) fn signal_thread(tid: i32, sig: libc::c_int) {
        // SAFETY: tgkill on our own process; a thread that is gone makes it fail, harmlessly.
        unsafe {
            libc::tgkill(libc::getpid(), tid, sig);
        }
    }

    /// (si_code, fault address, sender pid, sender uid) of a signal.
    pub(super) fn siginfo(info: *const libc::siginfo_t) -> (i32, usize, i32, u32) {
        if info.is_null() {
            return (0, 0, -1, 0);
        }
        // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler; the union
        // fields read are those of kill() and fault signals, zero otherwise.
        unsafe {
            let i = &*info;
            (i.si_code, i.si_addr() as usize, i.si_pid(), i.si_uid())
        }
    }

    /// The instruction the thread was at when the signal came, from the saved context.
    pub(super) fn program_counter(ctx: *const libc::c_void) -> usize {
        if ctx.is_null() {
            return 0;
        }
        // SAFETY: an SA_SIGINFO handler's third argument is the thread's ucontext_t.
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        unsafe {
            (*(ctx as *const libc::ucontext_t)).uc_mcontext.gregs[libc::REG_RIP as usize] as usize
        }
        // SAFETY: as above.
        #[cfg(all(target_os = "linux", target_arch = "aarch64"))]
        unsafe {
            (*(ctx as *const libc::ucontext_t)).uc_mcontext.pc as usize
        }
        #[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
        0
    }

    /// The calling thread's name (at most 15 bytes, from the kernel).
    pub(super) fn thread_name(buf: &mut [u8; 16]) -> &str {
        // SAFETY: PR_GET_NAME writes at most 16 bytes, NUL included.
        unsafe {
            libc::prctl(libc::PR_GET_NAME, buf.as_mut_ptr() as libc::c_ulong, 0, 0, 0);
        }
        let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        std::str::from_utf8(&buf[..len]).unwrap_or("?")
    }

    /// Return addresses of the calling thread's stack; how many were taken.
    pub(super) fn backtrace(frames: &mut [usize]) -> usize {
        // SAFETY: backtrace writes at most `len` pointers into the buffer.
        unsafe {
            libc::backtrace(frames.as_mut_ptr() as *mut *mut libc::c_void, frames.len() as libc::c_int).max(0) as usize
        }
    }

    /// One line per address, written straight to `fd` (no allocation).
    pub(super) fn symbols(frames: &[usize], fd: i32) {
        if fd < 0 || frames.is_empty() {
            return;
        }
        // SAFETY: the buffer holds `len` addresses; backtrace_symbols_fd only reads them.
        unsafe {
            libc::backtrace_symbols_fd(frames.as_ptr() as *const *mut libc::c_void, frames.len() as libc::c_int, fd)
        }
    }

    pub(super) fn write_all(fd: i32, mut bytes: &[u8]) {
        while fd >= 0 && !bytes.is_empty() {
            // SAFETY: writes from a valid buffer of the given length.
            let n = unsafe { libc::write(fd, bytes.as_ptr() as *const libc::c_void, bytes.len()) };
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            if n <= 0 {
                return;
            }
            bytes = &bytes[n as usize..];
        }
    }

    /// DEBUG SEGFAULT: a write to a read-only private page.
    pub(super) fn segfault() -> ! {
        // SAFETY: deliberately invalid: the write to a PROT_READ page faults, and the fatal
        // handler ends the process. The volatile write keeps the compiler from dropping it.
        unsafe {
            let p = libc::mmap(ptr::null_mut(), 4096, libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
            ptr::write_volatile(p as *mut u8, b'x');
            libc::abort()
        }
    }

    /// Size of the alternate signal stacks hotkv gives its threads.
    const ALT_STACK: usize = 64 * 1024;

    thread_local! {
        /// The alternate stack this module mapped for the thread, if any.
        static MAPPED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    /// Maps (`on`) or unmaps an alternate signal stack for the calling thread.
    pub(super) fn alt_stack(on: bool) {
        let mapped = MAPPED.with(|m| m.get());
        // SAFETY: the stack is a fresh anonymous mapping that stays mapped while it is the
        // thread's alternate stack; it is disabled before it is unmapped.
        unsafe {
            if on && mapped == 0 {
                let p = libc::mmap(
                    ptr::null_mut(),
                    ALT_STACK,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                if p == libc::MAP_FAILED {
                    return;
                }
                let st = libc::stack_t { ss_sp: p, ss_flags: 0, ss_size: ALT_STACK };
                if libc::sigaltstack(&st, ptr::null_mut()) != 0 {
                    libc::munmap(p, ALT_STACK);
                    return;
                }
                MAPPED.with(|m| m.set(p as usize));
            } else if !on && mapped != 0 {
                let st = libc::stack_t { ss_sp: ptr::null_mut(), ss_flags: libc::SS_DISABLE, ss_size: 0 };
                libc::sigaltstack(&st, ptr::null_mut());
                libc::munmap(mapped as *mut libc::c_void, ALT_STACK);
                MAPPED.with(|m| m.set(0));
            }
        }
    }
}
