//! SLOWLOG and LATENCY: reading and resetting the slow log and the latency monitor that
//! dispatch and the cron fill.

use std::fmt::Write as _;

use hotkv_engine::CommandError;
use hotkv_engine::command::{CommandSpec, flags as f};
use hotkv_protocol::{Args, ReplyBuf};

use super::{reply_help, row, text};
use crate::registry::{Flow, ServerSpec};
use crate::server::{Server, unix_ms};
use crate::session::Session;
use crate::slowlog::{LatencyMonitor, LatencySeries};

const ADMIN: u32 = f::ADMIN | f::LOADING | f::STALE;
const LAT: u32 = f::ADMIN | f::NOSCRIPT | f::LOADING | f::STALE;
const LAT_TIPS: &[&str] = &["nondeterministic_output", "request_policy:all_nodes", "response_policy:special"];

/// SLOWLOG and LATENCY rows.
pub static COMMANDS: &[ServerSpec] = &[
    CommandSpec::container(
        "slowlog",
        -2,
        "server",
        "2.2.12",
        "A container for slow log commands.",
        &[
            row(
                "get",
                -2,
                ADMIN,
                0,
                &[],
                "server",
                "2.2.12",
                "Returns the slow log's entries.",
                "O(N) where N is the number of entries returned",
                slowlog_get,
            )
            .with_tips(&["request_policy:all_nodes", "nondeterministic_output"]),
            row(
                "help",
                2,
                f::LOADING | f::STALE,
                0,
                &[],
                "server",
                "6.2.0",
                "Show helpful text about the different subcommands",
                "O(1)",
                slowlog_help,
            ),
            row(
                "len",
                2,
                ADMIN,
                0,
                &[],
                "server",
                "2.2.12",
                "Returns the number of entries in the slow log.",
                "O(1)",
                slowlog_len,
            )
            .with_tips(&["request_policy:all_nodes", "response_policy:agg_sum", "nondeterministic_output"]),
            row(
                "reset",
                2,
                ADMIN,
                0,
                &[],
                "server",
                "2.2.12",
                "Clears all entries from the slow log.",
                "O(N) where N is the number of entries in the slowlog",
                slowlog_reset,
            )
            .with_tips(&["request_policy:all_nodes", "response_policy:all_succeeded"]),
        ],
    ),
    CommandSpec::container(
        "latency",
        -2,
        "server",
        "2.8.13",
        "A container for latency diagnostics commands.",
        &[
            row(
                "doctor",
                2,
                LAT,
                0,
                &[],
                "server",
                "2.8.13",
                "Returns a human-readable latency analysis report.",
                "O(1)",
                latency_doctor,
            )
            .with_tips(LAT_TIPS),
            row(
                "graph",
                3,
                LAT,
                0,
                &[],
                "server",
                "2.8.13",
                "Returns a latency graph for an event.",
                "O(1)",
                latency_graph,
            )
            .with_tips(LAT_TIPS),
            row(
                "help",
                2,
                f::LOADING | f::STALE,
                0,
                &[],
                "server",
                "2.8.13",
                "Returns helpful text about the different subcommands.",
                "O(1)",
                latency_help,
            ),
            row(
                "histogram",
                -2,
                LAT,
                0,
                &[],
                "server",
                "7.0.0",
                "Returns the cumulative distribution of latencies of a subset or all commands.",
                "O(N) where N is the number of commands with latency information being retrieved.",
                latency_histogram,
            )
            .with_tips(LAT_TIPS),
            row(
                "history",
                3,
                LAT,
                0,
                &[],
                "server",
                "2.8.13",
                "Returns timestamp-latency samples for an event.",
                "O(1)",
                latency_history,
            )
            .with_tips(LAT_TIPS),
            row(
                "latest",
                2,
                LAT,
                0,
                &[],
                "server",
                "2.8.13",
                "Returns the latest latency samples for all events.",
                "O(1)",
                latency_latest,
            )
            .with_tips(LAT_TIPS),
            row(
                "reset",
                -2,
                LAT,
                0,
                &[],
                "server",
                "2.8.13",
                "Resets the latency data for one or more events.",
                "O(1)",
                latency_reset,
            )
            .with_tips(&["request_policy:all_nodes", "response_policy:agg_sum"]),
        ],
    ),
];

/// SLOWLOG GET's count: 10 by default, -1 for all, capped at the log's length.
pub fn slowlog_count(arg: Option<&[u8]>, len: usize) -> Result<usize, CommandError> {
    let Some(arg) = arg else { return Ok(len.min(10)) };
    let msg = || CommandError::err("count should be greater than or equal to -1");
    let n = hotkv_protocol::parse_i64(arg).ok_or_else(msg)?;
    match n {
        -1 => Ok(len),
        n if n < -1 => Err(msg()),
        n => Ok((n as u64).min(len as u64) as usize),
    }
}

fn slowlog_get(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    if args.len() > 3 {
        return Err(super::subcommand_syntax_error(&args));
    }
    let log = srv.slowlog.lock();
    let n = slowlog_count(args.opt(2), log.len())?;
    out.array(n);
    for e in log.entries().take(n) {
        out.array(6);
        out.int(e.id as i64);
        out.int(e.time);
        out.int(e.micros as i64);
        out.array(e.args.len());
        for a in &e.args {
            out.bulk(a);
        }
        out.bulk(e.addr.as_bytes());
        out.bulk(e.name.as_bytes());
    }
    Ok(Flow::Continue)
}

fn slowlog_len(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    out.int(srv.slowlog.lock().len() as i64);
    Ok(Flow::Continue)
}

fn slowlog_reset(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    srv.slowlog.lock().reset();
    out.ok();
    Ok(Flow::Continue)
}

fn slowlog_help(_: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    reply_help(
        out,
        &args,
        &[
            "GET [<count>]",
            "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
            "    Entries are made of:",
            "    id, timestamp, time in microseconds, arguments array, client IP and port,",
            "    client name",
            "LEN",
            "    Return the length of the slowlog.",
            "RESET",
            "    Reset the slowlog.",
        ],
    );
    Ok(Flow::Continue)
}

fn latency_latest(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let mon = srv.latency.lock();
    let events: Vec<_> = mon.events().collect();
    out.array(events.len());
    for (name, s) in events {
        let (t, ms) = s.samples.back().copied().unwrap_or((0, 0));
        out.array(4);
        out.bulk(name.as_bytes());
        out.int(t);
        out.int(ms as i64);
        out.int(s.max as i64);
    }
    Ok(Flow::Continue)
}

fn latency_history(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let mon = srv.latency.lock();
    let samples = mon.event(&text(args.get(2))).map(|s| s.samples.clone()).unwrap_or_default();
    out.array(samples.len());
    for (t, ms) in samples {
        out.array(2);
        out.int(t);
        out.int(ms as i64);
    }
    Ok(Flow::Continue)
}

fn latency_reset(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let names: Vec<String> = args.iter().skip(2).map(text).collect();
    out.int(srv.latency.lock().reset(&names) as i64);
    Ok(Flow::Continue)
}

fn latency_graph(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let name = text(args.get(2));
    let mon = srv.latency.lock();
    let Some(series) = mon.event(&name) else {
        return Err(CommandError::err(format!("No samples available for event '{name}'")));
    };
    out.verbatim(graph(&name, series, unix_ms() / 1000).as_bytes());
    Ok(Flow::Continue)
}

/// LATENCY GRAPH's text: a header and Valkey's filled sparkline, 80 columns by 4 rows,
/// labelled with the age of each sample.
pub fn graph(event: &str, s: &LatencySeries, now_s: i64) -> String {
    let values: Vec<u64> = s.samples.iter().map(|x| x.1).collect();
    let (min, max) = (values.iter().copied().min().unwrap_or(0), values.iter().copied().max().unwrap_or(0));
    let mut g = format!("{event} - high {max} ms, low {min} ms (all time high {} ms)\n", s.max);
    g.push_str(&"-".repeat(80));
    g.push('\n');
    let labels: Vec<String> = s
        .samples
        .iter()
        .map(|(t, _)| match now_s - t {
            e if e < 60 => format!("{e}s"),
            e if e < 3600 => format!("{}m", e / 60),
            e if e < 86400 => format!("{}h", e / 3600),
            e => format!("{}d", e / 86400),
        })
        .collect();
    for start in (0..values.len()).step_by(80) {
        if start != 0 {
            g.push('\n');
        }
        let end = (start + 80).min(values.len());
        sparkline(&mut g, &values[start..end], &labels[start..end], min, max);
    }
    g
}

/// Valkey's `sparklineRenderRange` with SPARKLINE_FILL, 4 rows, labels one row below.
fn sparkline(g: &mut String, values: &[u64], labels: &[String], min: u64, max: u64) {
    const FILL: &[u8] = b"_o#";
    const ROWS: i64 = 4;
    let rel_max = if max == min { 1.0 } else { (max - min) as f64 };
    let steps = FILL.len() as i64 * ROWS;
    let step_of = |v: u64| (((v - min) as f64 * steps as f64) as i64 as f64 / rel_max) as i64;
    let mut row = 0i64;
    loop {
        let mut chars = vec![b' '; values.len()];
        let mut more = false;
        for (j, &v) in values.iter().enumerate() {
            if row < ROWS {
                more = true;
                let step = step_of(v).clamp(0, steps - 1);
                let idx = step - (ROWS - row - 1) * FILL.len() as i64;
                if (0..FILL.len() as i64).contains(&idx) {
                    chars[j] = FILL[idx as usize];
                } else if idx >= FILL.len() as i64 {
                    chars[j] = b'|';
                }
            } else {
                // One blank row separates the graph from the labels.
                if row - ROWS < 1 {
                    more = true;
                    break;
                }
                let k = (row - ROWS - 1) as usize;
                if let Some(&c) = labels[j].as_bytes().get(k) {
                    more = true;
                    chars[j] = c;
                }
            }
        }
        if !more {
            break;
        }
        row += 1;
        g.push_str(&String::from_utf8_lossy(&chars));
        g.push('\n');
    }
}

/// LATENCY DOCTOR's report (Valkey's `createLatencyReport`, for the events hotkv records).
pub fn doctor(
    mon: &LatencyMonitor,
    threshold_ms: u64,
    slowlog_us: i64,
    slowlog_max: usize,
    hz: u32,
    now_s: i64,
) -> String {
    let events: Vec<_> = mon.events().collect();
    if events.is_empty() && threshold_ms == 0 {
        return "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Valkey instance. You may use \
                \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it.\n"
            .to_string();
    }
    let mut r = String::new();
    let (mut slowlog_enable, mut slowlog_tune, mut inspect, mut scheduler, mut hz_advice, mut large) =
        (false, false, false, false, false, false);
    let mut advices = 0;
    for (i, (name, s)) in events.iter().enumerate() {
        if i == 0 {
            r.push_str("Latency spikes are observed in this Valkey instance.\n\n");
        }
        let n = s.samples.len().max(1) as u64;
        let avg = s.samples.iter().map(|x| x.1).sum::<u64>() / n;
        let mad = s.samples.iter().map(|x| x.1.abs_diff(avg)).sum::<u64>() / n;
        let oldest = s.samples.iter().map(|x| x.0).min().unwrap_or(now_s);
        let period = (now_s - oldest).max(1);
        let _ = write!(
            r,
            "{}. {name}: {} latency spikes (average {avg}ms, mean deviation {mad}ms, period {:.2} sec). Worst all time event {}ms.",
            i + 1,
            s.samples.len(),
            period as f64 / n as f64,
            s.max
        );
        match name.as_str() {
            "command" => {
                if slowlog_us < 0 || slowlog_max == 0 {
                    slowlog_enable = true;
                    advices += 1;
                } else if slowlog_us / 1000 > threshold_ms as i64 {
                    slowlog_tune = true;
                    advices += 1;
                }
                inspect = true;
                large = true;
                advices += 2;
            }
            "fast-command" => {
                scheduler = true;
                advices += 1;
            }
            "expire-cycle" => {
                hz_advice = true;
                large = true;
                advices += 2;
            }
            _ => {}
        }
        r.push('\n');
    }
    if events.is_empty() && advices == 0 {
        r.push_str(
            "No latency spike was observed during the lifetime of this Valkey instance, not in the slightest bit.\n",
        );
        return r;
    }
    if advices == 0 {
        r.push_str("\nThere are latency events logged that are not easy to fix. Please get some help from Valkey community, providing this report in your help request.\n");
        return r;
    }
    r.push_str("\nHere is some advice for you:\n\n");
    let t = threshold_ms * 1000;
    if slowlog_enable {
        let _ = writeln!(
            r,
            "- There are latency issues with potentially slow commands you are using. Try to enable the Slow Log Valkey feature using the command 'CONFIG SET slowlog-log-slower-than {t}'. If the Slow log is disabled Valkey is not able to log slow commands execution for you."
        );
    }
    if slowlog_tune {
        let _ = writeln!(
            r,
            "- Your current Slow Log configuration only logs events that are slower than your configured latency monitor threshold. Please use 'CONFIG SET slowlog-log-slower-than {t}'."
        );
    }
    if inspect {
        r.push_str("- Check your Slow Log to understand what are the commands you are running which are too slow to execute. Please check https://valkey.io/commands/slowlog for more information.\n");
    }
    if scheduler {
        r.push_str("- The system is slow to execute Valkey code paths not containing system calls. This usually means the system does not provide Valkey CPU time to run for long periods. You should try to:\n  1) Lower the system load.\n  2) Use a computer / VM just for Valkey if you are running other software in the same system.\n  3) Check if you have a \"noisy neighbour\" problem.\n  4) Check with 'valkey-cli --intrinsic-latency 100' what is the intrinsic latency in your system.\n  5) Check if the problem is allocator-related by recompiling Valkey with MALLOC=libc, if you are using Jemalloc. However this may create fragmentation problems.\n");
    }
    if hz_advice && hz < 100 {
        r.push_str("- In order to make the Valkey keys expiring process more incremental, try to set the 'hz' configuration parameter to 100 using 'CONFIG SET hz 100'.\n");
    }
    if large {
        r.push_str("- Deleting, expiring or evicting (because of maxmemory policy) large objects is a blocking operation. If you have very large objects that are often deleted, expired, or evicted, try to fragment those objects into multiple smaller objects.\n");
    }
    r
}

fn latency_doctor(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let rt = srv.rt.load();
    let hz = srv.engine.load().hz;
    let report = doctor(
        &srv.latency.lock(),
        rt.latency_threshold,
        rt.slowlog_threshold,
        rt.slowlog_max_len,
        hz,
        unix_ms() / 1000,
    );
    out.verbatim(report.as_bytes());
    Ok(Flow::Continue)
}

/// LATENCY HISTOGRAM [command ...]: per command (a container's name also covers its
/// subcommands; unknown names are skipped), the calls and the cumulative distribution of
/// their latencies, as Valkey replies it. Commands with no samples are left out.
fn latency_histogram(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let ids: Vec<usize> = if args.len() == 2 {
        srv.registry.all().map(|c| c.id).collect()
    } else {
        let mut ids = Vec::new();
        for i in 2..args.len() {
            let Some(id) = srv.registry.by_name(&String::from_utf8_lossy(args.get(i))) else { continue };
            ids.push(id);
            ids.extend(srv.registry.get(id).subs.iter().copied());
        }
        ids
    };
    let rows: Vec<_> = ids.into_iter().filter_map(|id| Some((id, srv.stats.latency_cdf(id)?))).collect();
    out.map(rows.len());
    for (id, (calls, buckets)) in rows {
        out.bulk(srv.registry.get(id).full_name.as_bytes());
        out.map(2);
        out.bulk(b"calls");
        out.int(calls as i64);
        out.bulk(b"histogram_usec");
        out.map(buckets.len());
        for (micros, count) in buckets {
            out.int(micros as i64);
            out.int(count as i64);
        }
    }
    Ok(Flow::Continue)
}

fn latency_help(_: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    reply_help(
        out,
        &args,
        &[
            "DOCTOR",
            "    Return a human readable latency analysis report.",
            "GRAPH <event>",
            "    Return an ASCII latency graph for the <event> class.",
            "HISTORY <event>",
            "    Return time-latency samples for the <event> class.",
            "LATEST",
            "    Return the latest latency samples for all events.",
            "RESET [<event> ...]",
            "    Reset latency data of one or more <event> classes.",
            "    (default: reset all data for all event classes)",
            "HISTOGRAM [COMMAND ...]",
            "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
            "    If no commands are specified then all histograms are replied.",
        ],
    );
    Ok(Flow::Continue)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::testutil::{client, server};

    #[test]
    fn slowlog_counts_and_errors() {
        assert_eq!(slowlog_count(None, 30).unwrap(), 10);
        assert_eq!(slowlog_count(None, 3).unwrap(), 3);
        assert_eq!(slowlog_count(Some(b"-1"), 30).unwrap(), 30);
        assert_eq!(slowlog_count(Some(b"0"), 30).unwrap(), 0);
        assert_eq!(slowlog_count(Some(b"100"), 30).unwrap(), 30);
        for bad in [&b"-2"[..], b"x"] {
            assert_eq!(
                slowlog_count(Some(bad), 30).unwrap_err().message(),
                "ERR count should be greater than or equal to -1"
            );
        }
    }

    #[test]
    fn slowlog_entries_and_trimming() {
        let srv = server();
        let mut c = client(&srv, 43000);
        // Log everything: a negative threshold would log nothing, 0 logs every command.
        let mut rt = (**srv.rt.load()).clone();
        rt.slowlog_threshold = 0;
        srv.rt.store(std::sync::Arc::new(rt));
        c.run(&srv, &["client", "setname", "me"]);
        let long = "x".repeat(200);
        c.run(&srv, &["echo", &long]);
        let many: Vec<String> = (0..40).map(|i| i.to_string()).collect();
        let mut argv = vec!["ping"];
        argv.extend(many.iter().map(String::as_str));
        c.run(&srv, &argv);
        let r = c.run(&srv, &["slowlog", "get", "2"]);
        assert!(r.starts_with("*2\r\n*6\r\n:2\r\n:"), "{r}");
        assert!(r.contains("*32\r\n$4\r\nping\r\n"), "{r}");
        assert!(r.contains("$23\r\n... (10 more arguments)\r\n$15\r\n127.0.0.1:43000\r\n$2\r\nme\r\n"), "{r}");
        assert!(r.contains(&format!("$147\r\n{}... (72 more bytes)\r\n", "x".repeat(128))), "{r}");
        assert_eq!(c.run(&srv, &["slowlog", "len"]), ":4\r\n");
        assert_eq!(c.run(&srv, &["slowlog", "reset"]), "+OK\r\n");
        assert_eq!(
            c.run(&srv, &["slowlog", "get", "1", "2"]),
            "-ERR unknown subcommand or wrong number of arguments for 'get'. Try SLOWLOG HELP.\r\n"
        );
        assert!(c.run(&srv, &["slowlog", "help"]).starts_with("*12\r\n+SLOWLOG <subcommand>"));
    }

    #[test]
    fn latency_replies() {
        let srv = server();
        let mut c = client(&srv, 43001);
        assert_eq!(c.run(&srv, &["latency", "latest"]), "*0\r\n");
        assert_eq!(c.run(&srv, &["latency", "graph", "command"]), "-ERR No samples available for event 'command'\r\n");
        assert!(c.run(&srv, &["latency", "doctor"]).contains("I'm sorry, Dave"));
        srv.latency.lock().add("command", 1000, 250);
        srv.latency.lock().add("command", 1001, 500);
        let r = c.run(&srv, &["latency", "latest"]);
        assert_eq!(r, "*1\r\n*4\r\n$7\r\ncommand\r\n:1001\r\n:500\r\n:500\r\n");
        let r = c.run(&srv, &["latency", "history", "command"]);
        assert_eq!(r, "*2\r\n*2\r\n:1000\r\n:250\r\n*2\r\n:1001\r\n:500\r\n");
        let g = graph("command", srv.latency.lock().event("command").unwrap(), 1010);
        assert_eq!(
            g,
            format!(
                "command - high 500 ms, low 250 ms (all time high 500 ms)\n{}\n #\n |\n |\n_|\n  \n19\n0s\ns \n",
                "-".repeat(80)
            )
        );
        let d = c.run(&srv, &["latency", "doctor"]);
        assert!(d.contains("1. command: 2 latency spikes (average 375ms, mean deviation 125ms"), "{d}");
        assert_eq!(c.run(&srv, &["latency", "reset", "command", "other"]), ":1\r\n");
        assert_eq!(c.run(&srv, &["latency", "history", "command"]), "*0\r\n");
    }
}
