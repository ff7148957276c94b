//! Logging in Valkey's format: `pid:role dd Mon yyyy hh:mm:ss.mmm <mark> message`.
//!
//! Libraries emit `tracing` events; this module installs the one subscriber, maps `loglevel`
//! onto tracing levels (debug→TRACE, verbose→DEBUG, notice→INFO, warning→WARN/ERROR) and
//! writes to standard output or the `logfile`. Level changes at runtime (CONFIG SET loglevel)
//! take effect at once through an atomic.

use std::fmt::Write as _;
use std::fs::OpenOptions;
use std::io::Write;
use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};

/// Verbosity levels of the `loglevel` directive, most verbose first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    /// `debug`: everything.
    Debug = 0,
    /// `verbose`.
    Verbose = 1,
    /// `notice`, the default.
    Notice = 2,
    /// `warning`.
    Warning = 3,
    /// `nothing`.
    Nothing = 4,
}

impl LogLevel {
    /// Parses the directive's word.
    pub fn parse(s: &str) -> LogLevel {
        match s {
            "debug" => LogLevel::Debug,
            "verbose" => LogLevel::Verbose,
            "warning" => LogLevel::Warning,
            "nothing" => LogLevel::Nothing,
            _ => LogLevel::Notice,
        }
    }

    fn of(level: &Level) -> LogLevel {
        match *level {
            Level::TRACE => LogLevel::Debug,
            Level::DEBUG => LogLevel::Verbose,
            Level::INFO => LogLevel::Notice,
            _ => LogLevel::Warning,
        }
    }

    fn mark(self) -> char {
        match self {
            LogLevel::Debug => '.',
            LogLevel::Verbose => '-',
            LogLevel::Notice => '*',
            _ => '#',
        }
    }
}

static LEVEL: AtomicU8 = AtomicU8::new(LogLevel::Notice as u8);
static ROLE: AtomicU8 = AtomicU8::new(b'M');
static SINK: OnceLock<Arc<Mutex<Box<dyn Write + Send>>>> = OnceLock::new();
/// The descriptor the log is written to (-1: nowhere), for the crash report, which a signal
/// handler writes with write(2) alone.
static FD: AtomicI32 = AtomicI32::new(-1);

/// Sets the minimum level logged.
pub fn set_level(level: LogLevel) {
    LEVEL.store(level as u8, Ordering::Relaxed);
}

/// Sets the role letter shown after the pid: `M` primary, `S` replica.
pub fn set_role(role: u8) {
    ROLE.store(role, Ordering::Relaxed);
}

/// Installs the subscriber, writing to `logfile` (empty: stdout; when daemonized with no
/// file, nowhere, as Valkey does).
pub fn init(level: LogLevel, logfile: &str, daemonized: bool) -> std::io::Result<()> {
    set_level(level);
    let (sink, fd): (Box<dyn Write + Send>, i32) = if !logfile.is_empty() {
        let file = OpenOptions::new().create(true).append(true).open(logfile)?;
        // The file lives as long as the process (SINK is never emptied), and so its fd.
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        (Box::new(file), fd)
    } else if daemonized {
        (Box::new(std::io::sink()), -1)
    } else {
        (Box::new(std::io::stdout()), libc::STDOUT_FILENO)
    };
    let sink = SINK.get_or_init(|| {
        FD.store(fd, Ordering::Relaxed);
        Arc::new(Mutex::new(sink))
    });
    let subscriber = tracing_subscriber::registry().with(ValkeyFormat { sink: sink.clone() });
    // A second init (tests) keeps the first subscriber.
    let _ = tracing::subscriber::set_global_default(subscriber);
    Ok(())
}

/// The log's file descriptor, -1 when the log goes nowhere. Lines written to it directly
/// (the crash report) land between whole lines of the tracing sink, which flushes each one.
pub fn raw_fd() -> i32 {
    FD.load(Ordering::Relaxed)
}

/// The start of a warning line: `pid:role timestamp # `.
pub fn prefix() -> String {
    format!("{}:{} {} {} ", pid(), ROLE.load(Ordering::Relaxed) as char, timestamp(), LogLevel::Warning.mark())
}

/// This process's id, asked of the kernel once: glibc does not cache `getpid`, and a busy
/// node (a reshard logs a line per SETSLOT) paid a system call per line. hotkv never forks.
fn pid() -> u32 {
    static PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *PID.get_or_init(std::process::id)
}

/// The role letter of log lines (`M` or `S`).
pub fn role() -> u8 {
    ROLE.load(Ordering::Relaxed)
}

/// Writes a line exactly as given, whatever the level (the startup banner).
pub fn raw(line: &str) {
    if let Some(sink) = SINK.get() {
        let mut w = sink.lock();
        let _ = writeln!(w, "{line}");
        let _ = w.flush();
    }
}

struct ValkeyFormat {
    sink: Arc<Mutex<Box<dyn Write + Send>>>,
}

impl<S: Subscriber> Layer<S> for ValkeyFormat {
    fn enabled(&self, metadata: &tracing::Metadata<'_>, _: Context<'_, S>) -> bool {
        LogLevel::of(metadata.level()) as u8 >= LEVEL.load(Ordering::Relaxed)
            && LEVEL.load(Ordering::Relaxed) != LogLevel::Nothing as u8
    }

    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let level = LogLevel::of(event.metadata().level());
        let mut v = MessageVisitor::default();
        event.record(&mut v);
        let line = format!(
            "{}:{} {} {} {}{}",
            pid(),
            ROLE.load(Ordering::Relaxed) as char,
            timestamp(),
            level.mark(),
            v.message,
            v.fields
        );
        let mut w = self.sink.lock();
        let _ = writeln!(w, "{line}");
        let _ = w.flush();
    }
}

#[derive(Default)]
struct MessageVisitor {
    message: String,
    fields: String,
}

impl Visit for MessageVisitor {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={}", field.name(), value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={:?}", field.name(), value);
        }
    }
}

/// `30 Nov 2026 03:51:16.123` in local time, as Valkey's log.
fn timestamp() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = now.as_secs() as libc::time_t;
    #[allow(unsafe_code)]
    // SAFETY: localtime_r writes only into the tm we pass and reads the given time value.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&secs, &mut tm);
        tm
    };
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    format!(
        "{:02} {} {} {:02}:{:02}:{:02}.{:03}",
        tm.tm_mday,
        MONTHS[tm.tm_mon.clamp(0, 11) as usize],
        tm.tm_year + 1900,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        now.subsec_millis()
    )
}
