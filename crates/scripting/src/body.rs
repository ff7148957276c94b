//! A script's body: its SHA1 name and the flags of its `#!lua` shebang line.

use hotkv_protocol::split_args;

/// Script flags, as Valkey's `SCRIPT_FLAG_*`.
pub mod flag {
    /// `no-writes`: the script may not call a write command.
    pub const NO_WRITES: u32 = 1 << 0;
    /// `allow-oom`: the script runs even over `maxmemory`.
    pub const ALLOW_OOM: u32 = 1 << 1;
    /// `allow-stale`: the script runs on a stale replica.
    pub const ALLOW_STALE: u32 = 1 << 2;
    /// `no-cluster`: the script refuses to run in cluster mode.
    pub const NO_CLUSTER: u32 = 1 << 3;
    /// No shebang: an old-style EVAL script, judged by the commands it calls.
    pub const EVAL_COMPAT_MODE: u32 = 1 << 4;
    /// `allow-cross-slot-keys`: the script may touch keys of several slots.
    pub const ALLOW_CROSS_SLOT: u32 = 1 << 5;

    /// The names of the flags a shebang or `register_function` may give, in Valkey's order.
    pub const NAMES: &[(u32, &str)] = &[
        (NO_WRITES, "no-writes"),
        (ALLOW_OOM, "allow-oom"),
        (ALLOW_STALE, "allow-stale"),
        (NO_CLUSTER, "no-cluster"),
        (ALLOW_CROSS_SLOT, "allow-cross-slot-keys"),
    ];

    /// The flag named `name`, if it is one.
    pub fn by_name(name: &[u8]) -> Option<u32> {
        NAMES.iter().find(|(_, n)| n.as_bytes() == name).map(|(f, _)| *f)
    }
}

/// A script's SHA1 as 40 lowercase hex digits, the name EVALSHA uses.
pub type Sha = [u8; 40];

/// The SHA1 of `body` in lowercase hex.
pub fn sha1_hex(body: &[u8]) -> Sha {
    let digest = sha1_smol::Sha1::from(body).digest().bytes();
    let mut out = [0u8; 40];
    for (i, b) in digest.iter().enumerate() {
        out[2 * i] = HEX[usize::from(b >> 4)];
        out[2 * i + 1] = HEX[usize::from(b & 15)];
    }
    out
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// What a shebang line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shebang {
    /// The script flags ([`flag`]); `EVAL_COMPAT_MODE` when there is no shebang.
    pub flags: u32,
    /// Bytes of the shebang line, newline excluded: the code the compiler sees starts there,
    /// so the user's line numbers stay right.
    pub len: usize,
}

/// Reads the `#!lua [flags=a,b]` line of an EVAL script (Valkey's
/// `evalExtractShebangFlags`); errors carry Valkey's texts, without the `ERR ` code.
pub fn eval_shebang(body: &[u8]) -> Result<Shebang, String> {
    if !body.starts_with(b"#!") {
        return Ok(Shebang { flags: flag::EVAL_COMPAT_MODE, len: 0 });
    }
    let Some(len) = body.iter().position(|&c| c == b'\n') else {
        return Err("Invalid script shebang".into());
    };
    let parts = match split_args(&body[..len]) {
        Ok(p) if !p.is_empty() => p,
        _ => return Err("Invalid engine in script shebang".into()),
    };
    if parts[0] != b"#!lua" {
        return Err(format!("Unexpected engine in script shebang: {}", String::from_utf8_lossy(&parts[0])));
    }
    let mut flags = 0;
    for part in &parts[1..] {
        let Some(list) = part.strip_prefix(b"flags=") else {
            return Err(format!("Unknown lua shebang option: {}", String::from_utf8_lossy(part)));
        };
        flags |= parse_flag_list(list)?;
    }
    Ok(Shebang { flags, len })
}

/// A comma-separated flag list as a shebang gives it (an empty list is no flag).
fn parse_flag_list(list: &[u8]) -> Result<u32, String> {
    let mut flags = 0;
    if list.is_empty() {
        return Ok(0);
    }
    for name in list.split(|&c| c == b',') {
        match flag::by_name(name) {
            Some(f) => flags |= f,
            None => return Err(format!("Unexpected flag in script shebang: {}", String::from_utf8_lossy(name))),
        }
    }
    Ok(flags)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_names_scripts_as_valkey() {
        assert_eq!(&sha1_hex(b"return 1"), b"e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
        assert_eq!(&sha1_hex(b""), b"da39a3ee5e6b4b0d3255bfef95601890afd80709");
    }

    #[test]
    fn shebangs() {
        assert_eq!(eval_shebang(b"return 1").unwrap(), Shebang { flags: flag::EVAL_COMPAT_MODE, len: 0 });
        assert_eq!(eval_shebang(b"#!lua\nreturn 1").unwrap(), Shebang { flags: 0, len: 5 });
        let s = eval_shebang(b"#!lua flags=no-writes,allow-oom\nreturn 1").unwrap();
        assert_eq!(s.flags, flag::NO_WRITES | flag::ALLOW_OOM);
        assert_eq!(eval_shebang(b"#!lua flags=\nreturn 1").unwrap().flags, 0);
        assert_eq!(eval_shebang(b"#!lua").unwrap_err(), "Invalid script shebang");
        assert_eq!(eval_shebang(b"#!python\n").unwrap_err(), "Unexpected engine in script shebang: #!python");
        assert_eq!(eval_shebang(b"#!lua foo=bar\n").unwrap_err(), "Unknown lua shebang option: foo=bar");
        assert_eq!(eval_shebang(b"#!lua flags=bad\n").unwrap_err(), "Unexpected flag in script shebang: bad");
    }
}
