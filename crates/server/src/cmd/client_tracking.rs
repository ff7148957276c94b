//! CLIENT TRACKING, CACHING, GETREDIR and TRACKINGINFO: a connection's side of client-side
//! caching (see `crate::tracking`), with Valkey 8.0's checks and error texts
//! (`clientCommand` in `networking.c`).

use hotkv_engine::CommandError;
use hotkv_protocol::{Args, ReplyBuf};

use super::text;
use crate::registry::Flow;
use crate::server::Server;
use crate::session::Session;
use crate::tracking::{Mode, Options};

/// CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX p ...] [BCAST] [OPTIN] [OPTOUT] [NOLOOP].
pub(crate) fn tracking(
    srv: &Server,
    sess: &mut Session,
    args: Args<'_>,
    out: &mut ReplyBuf,
) -> Result<Flow, CommandError> {
    let opts = parse(srv, &args)?;
    let on_off = args.get(2);
    if on_off.eq_ignore_ascii_case(b"on") {
        check(sess, &opts)?;
        let mode = Mode { bcast: opts.bcast, optin: opts.optin, optout: opts.optout };
        srv.tracking.enable(&sess.info, opts);
        sess.tracking = Some(mode);
    } else if on_off.eq_ignore_ascii_case(b"off") {
        disable(srv, sess);
    } else {
        return Err(CommandError::Syntax);
    }
    out.ok();
    Ok(Flow::Continue)
}

/// Turns tracking off for the session (CLIENT TRACKING OFF, RESET).
pub(crate) fn disable(srv: &Server, sess: &mut Session) {
    srv.tracking.disable(&sess.info);
    sess.tracking = None;
    sess.caching = false;
}

/// CLIENT CACHING YES|NO: whether the next command's reads are tracked, in OPTIN or OPTOUT
/// mode.
pub(crate) fn caching(
    _: &Server,
    sess: &mut Session,
    args: Args<'_>,
    out: &mut ReplyBuf,
) -> Result<Flow, CommandError> {
    let Some(mode) = sess.tracking else {
        return Err(CommandError::err(
            "CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled",
        ));
    };
    let opt = args.get(2);
    if opt.eq_ignore_ascii_case(b"yes") {
        if !mode.optin {
            return Err(CommandError::err("CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode."));
        }
    } else if opt.eq_ignore_ascii_case(b"no") {
        if !mode.optout {
            return Err(CommandError::err("CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode."));
        }
    } else {
        return Err(CommandError::Syntax);
    }
    sess.caching = true;
    out.ok();
    Ok(Flow::Continue)
}

/// CLIENT GETREDIR: the redirect id, 0 without one, -1 when tracking is off.
pub(crate) fn getredir(_: &Server, sess: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    out.int(redirect(sess));
    Ok(Flow::Continue)
}

/// CLIENT TRACKINGINFO: `flags` (a set), `redirect` and `prefixes`, as Valkey lists them.
pub(crate) fn trackinginfo(
    _: &Server,
    sess: &mut Session,
    _: Args<'_>,
    out: &mut ReplyBuf,
) -> Result<Flow, CommandError> {
    let t = sess.info.tracking.current();
    let mut flags: Vec<&str> = vec![if t.is_some() { "on" } else { "off" }];
    if let Some(t) = &t {
        if t.bcast {
            flags.push("bcast");
        }
        if t.optin {
            flags.push("optin");
            if sess.caching {
                flags.push("caching-yes");
            }
        }
        if t.optout {
            flags.push("optout");
            if sess.caching {
                flags.push("caching-no");
            }
        }
        if t.noloop {
            flags.push("noloop");
        }
        if t.broken.load(std::sync::atomic::Ordering::Relaxed) {
            flags.push("broken_redirect");
        }
    }
    out.map(3);
    out.bulk(b"flags");
    out.set(flags.len());
    flags.iter().for_each(|f| out.bulk(f.as_bytes()));
    out.bulk(b"redirect");
    out.int(redirect(sess));
    out.bulk(b"prefixes");
    let prefixes = t.as_ref().map_or(&[][..], |t| &t.prefixes[..]);
    out.array(prefixes.len());
    prefixes.iter().for_each(|p| out.bulk(p));
    Ok(Flow::Continue)
}

fn redirect(sess: &Session) -> i64 {
    sess.info.tracking.current().map_or(-1, |t| t.redirect as i64)
}

/// The options after ON|OFF, checked as Valkey parses them: REDIRECT once, to a client that
/// exists now.
fn parse(srv: &Server, args: &Args<'_>) -> Result<Options, CommandError> {
    let mut opts = Options::default();
    let mut redirect: i64 = 0;
    let mut j = 3;
    while j < args.len() {
        let a = args.get(j);
        let more = j + 1 < args.len();
        if a.eq_ignore_ascii_case(b"redirect") && more {
            j += 1;
            if redirect != 0 {
                return Err(CommandError::err("A client can only redirect to a single other client"));
            }
            redirect = hotkv_protocol::parse_i64(args.get(j)).ok_or(CommandError::NotInteger)?;
            let target = u64::try_from(redirect).ok().and_then(|id| srv.clients.get(id));
            let Some(target) = target else {
                return Err(CommandError::err("The client ID you want redirect to does not exist"));
            };
            opts.redirect = target.id;
            opts.target = Some(target);
        } else if a.eq_ignore_ascii_case(b"bcast") {
            opts.bcast = true;
        } else if a.eq_ignore_ascii_case(b"optin") {
            opts.optin = true;
        } else if a.eq_ignore_ascii_case(b"optout") {
            opts.optout = true;
        } else if a.eq_ignore_ascii_case(b"noloop") {
            opts.noloop = true;
        } else if a.eq_ignore_ascii_case(b"prefix") && more {
            j += 1;
            opts.prefixes.push(args.get(j).to_vec());
        } else {
            return Err(CommandError::Syntax);
        }
        j += 1;
    }
    Ok(opts)
}

/// The checks of CLIENT TRACKING ON, in Valkey's order: options against each other and
/// against the mode tracking is already in, then prefix overlaps.
fn check(sess: &Session, opts: &Options) -> Result<(), CommandError> {
    if !opts.bcast && !opts.prefixes.is_empty() {
        return Err(CommandError::err("PREFIX option requires BCAST mode to be enabled"));
    }
    if let Some(m) = sess.tracking
        && m.bcast != opts.bcast
    {
        return Err(CommandError::err(
            "You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it \
             with a different mode.",
        ));
    }
    if opts.bcast && (opts.optin || opts.optout) {
        return Err(CommandError::err("OPTIN and OPTOUT are not compatible with BCAST"));
    }
    if opts.optin && opts.optout {
        return Err(CommandError::err("You can't specify both OPTIN mode and OPTOUT mode"));
    }
    if let Some(m) = sess.tracking
        && ((opts.optin && m.optout) || (opts.optout && m.optin))
    {
        return Err(CommandError::err(
            "You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it \
             with a different mode.",
        ));
    }
    if opts.bcast {
        let existing = sess.info.tracking.current().map(|t| t.prefixes.clone()).unwrap_or_default();
        check_prefixes(&existing, &opts.prefixes)?;
    }
    Ok(())
}

/// Prefixes of one client must not overlap (one a prefix of the other), neither with those
/// it has nor among those given (Valkey's `checkPrefixCollisionsOrReply`).
fn check_prefixes(existing: &[Box<[u8]>], given: &[Vec<u8>]) -> Result<(), CommandError> {
    let overlap = |a: &[u8], b: &[u8]| {
        let n = a.len().min(b.len());
        a[..n] == b[..n]
    };
    for (i, p) in given.iter().enumerate() {
        if let Some(e) = existing.iter().find(|e| overlap(e, p)) {
            return Err(CommandError::err(format!(
                "Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a single client must not overlap.",
                text(p),
                text(e)
            )));
        }
        if let Some(q) = given[i + 1..].iter().find(|q| overlap(p, q)) {
            return Err(CommandError::err(format!(
                "Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a single client must not \
                 overlap.",
                text(p),
                text(q)
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(v: &[&str]) -> Vec<Vec<u8>> {
        v.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    #[test]
    fn prefix_overlaps_are_reported_as_valkey_words_them() {
        let e = check_prefixes(&[], &b(&["FOOBAR", "FOO"])).unwrap_err().message().to_string();
        assert_eq!(
            e,
            "ERR Prefix 'FOOBAR' overlaps with another provided prefix 'FOO'. Prefixes for a single client must not \
             overlap."
        );
        let have: Vec<Box<[u8]>> = vec![Box::from(&b"FOO"[..]), Box::from(&b"BAR"[..])];
        let e = check_prefixes(&have, &b(&["FO"])).unwrap_err().message().to_string();
        assert_eq!(
            e,
            "ERR Prefix 'FO' overlaps with an existing prefix 'FOO'. Prefixes for a single client must not overlap."
        );
        assert!(check_prefixes(&have, &b(&["BARB"])).is_err());
        assert!(check_prefixes(&have, &b(&["BAZ", "QUX"])).is_ok());
        // The empty prefix overlaps with everything.
        assert!(check_prefixes(&[Box::from(&b""[..])], &b(&["x"])).is_err());
    }
}
