//! FUNCTION libraries: the shared registry of loaded libraries and their functions (Valkey's
//! `functionsLibCtx`), their `#!lua name=...` metadata, and the FUNCTION DUMP payload.
//! Each thread's VM compiles the libraries on its first FCALL after a change
//! ([`crate::Vm::function`]).

use std::collections::BTreeMap;

use foldhash::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use hotkv_protocol::split_args;
use parking_lot::RwLock;

/// A function a library registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FnDef {
    /// Its name (FCALL's first argument).
    pub name: String,
    /// `description`, if given.
    pub description: Option<String>,
    /// Script flags ([`crate::flag`]).
    pub flags: u32,
}

/// A loaded library.
#[derive(Debug)]
pub struct Library {
    /// Its name, from the metadata line.
    pub name: String,
    /// Its whole code, metadata line included (what FUNCTION LIST WITHCODE and DUMP give).
    pub code: Box<[u8]>,
    /// Its functions, in registration order.
    pub functions: Vec<FnDef>,
}

/// What a library's first line says.
#[derive(Debug, PartialEq, Eq)]
pub struct Metadata {
    /// The engine (`lua`).
    pub engine: String,
    /// The library name.
    pub name: String,
    /// Length of the metadata line, newline excluded.
    pub len: usize,
}

/// Reads `#!<engine> name=<name>` (Valkey's `functionExtractLibMetaData` and the checks of
/// `functionsCreateWithLibraryCtx`). Errors carry Valkey's text without `ERR `.
pub fn metadata(code: &[u8]) -> Result<Metadata, String> {
    if !code.starts_with(b"#!") {
        return Err("Missing library metadata".into());
    }
    let Some(len) = code.iter().position(|&c| c == b'\n') else {
        return Err("Invalid library metadata".into());
    };
    let parts = match split_args(&code[..len]) {
        Ok(p) if !p.is_empty() => p,
        _ => return Err("Invalid library metadata".into()),
    };
    let engine = String::from_utf8_lossy(&parts[0][2..]).into_owned();
    let mut name: Option<String> = None;
    for part in &parts[1..] {
        if part.len() >= 5 && part[..5].eq_ignore_ascii_case(b"name=") {
            if name.is_some() {
                return Err("Invalid metadata value, name argument was given multiple times".into());
            }
            name = Some(String::from_utf8_lossy(&part[5..]).into_owned());
            continue;
        }
        return Err(format!("Invalid metadata value given: {}", String::from_utf8_lossy(part)));
    }
    let Some(name) = name else { return Err("Library name was not given".into()) };
    if !valid_name(&name) {
        return Err(NAME_RULE.into());
    }
    if !engine.eq_ignore_ascii_case("lua") {
        return Err(format!("Engine '{engine}' not found"));
    }
    Ok(Metadata { engine, name, len })
}

/// Valkey's error for a bad library or function name.
pub const NAME_RULE: &str =
    "Library names can only contain letters, numbers, or underscores(_) and must be at least one character long";

/// Letters, digits and `_`, at least one.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// How FUNCTION RESTORE treats libraries that exist already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestorePolicy {
    /// Fail if any exists (the default).
    Append,
    /// Replace the ones with the same name.
    Replace,
    /// Drop every library first.
    Flush,
}

/// The libraries and the functions they registered, shared by every thread.
#[derive(Default)]
pub struct Functions {
    inner: RwLock<Libs>,
    /// Bumped by every change, so each VM recompiles before its next FCALL.
    generation: AtomicU64,
}

#[derive(Default, Clone)]
struct Libs {
    libs: BTreeMap<String, Arc<Library>>,
    /// Function name, lowercased (FCALL finds functions whatever the case, as Valkey's
    /// dictionary does) -> its library and definition.
    fns: HashMap<String, (Arc<Library>, usize)>,
}

impl Libs {
    fn insert(&mut self, lib: Arc<Library>) {
        for (i, f) in lib.functions.iter().enumerate() {
            self.fns.insert(f.name.to_ascii_lowercase(), (lib.clone(), i));
        }
        self.libs.insert(lib.name.clone(), lib);
    }

    fn remove(&mut self, name: &str) -> Option<Arc<Library>> {
        let lib = self.libs.remove(name)?;
        for f in &lib.functions {
            self.fns.remove(&f.name.to_ascii_lowercase());
        }
        Some(lib)
    }

    /// Adds `lib` as FUNCTION LOAD does: a library of the same name is replaced only with
    /// `replace`; a function name may not belong to another library.
    fn add(&mut self, lib: Arc<Library>, replace: bool) -> Result<(), String> {
        if self.libs.contains_key(&lib.name) && !replace {
            return Err(format!("Library '{}' already exists", lib.name));
        }
        for f in &lib.functions {
            if let Some((other, _)) = self.fns.get(&f.name.to_ascii_lowercase())
                && other.name != lib.name
            {
                return Err(format!("Function {} already exists", f.name));
            }
        }
        self.remove(&lib.name);
        self.insert(lib);
        Ok(())
    }
}

impl Functions {
    /// FUNCTION LOAD: `compile` runs the code (in the caller's VM) and returns the functions it
    /// registered. Returns the library name.
    pub fn load(
        &self,
        code: &[u8],
        replace: bool,
        compile: impl FnOnce(&[u8], &Metadata) -> Result<Vec<FnDef>, String>,
    ) -> Result<String, String> {
        let md = metadata(code)?;
        if !replace && self.inner.read().libs.contains_key(&md.name) {
            return Err(format!("Library '{}' already exists", md.name));
        }
        let functions = compile(code, &md)?;
        if functions.is_empty() {
            return Err("No functions registered".into());
        }
        let lib = Library { name: md.name.clone(), code: code.into(), functions };
        self.inner.write().add(Arc::new(lib), replace)?;
        self.generation.fetch_add(1, Ordering::Release);
        Ok(md.name)
    }

    /// FUNCTION DELETE.
    pub fn delete(&self, name: &str) -> bool {
        let gone = self.inner.write().remove(name).is_some();
        if gone {
            self.generation.fetch_add(1, Ordering::Release);
        }
        gone
    }

    /// FUNCTION FLUSH.
    pub fn flush(&self) {
        *self.inner.write() = Libs::default();
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// FUNCTION RESTORE of the libraries in `codes`, all or nothing.
    pub fn restore(
        &self,
        codes: &[Vec<u8>],
        policy: RestorePolicy,
        mut compile: impl FnMut(&[u8], &Metadata) -> Result<Vec<FnDef>, String>,
    ) -> Result<(), String> {
        let mut next = if policy == RestorePolicy::Flush { Libs::default() } else { self.inner.read().clone() };
        let mut incoming = Libs::default();
        for code in codes {
            let md = metadata(code)?;
            let functions = compile(code, &md)?;
            if functions.is_empty() {
                return Err("No functions registered".into());
            }
            incoming.add(Arc::new(Library { name: md.name, code: code.as_slice().into(), functions }), false)?;
        }
        for lib in incoming.libs.into_values() {
            if policy == RestorePolicy::Append && next.libs.contains_key(&lib.name) {
                return Err(format!("Library {} already exists", lib.name));
            }
            if policy == RestorePolicy::Append {
                for f in &lib.functions {
                    if next.fns.contains_key(&f.name.to_ascii_lowercase()) {
                        return Err(format!("Function {} already exists", f.name));
                    }
                }
            }
            next.add(lib, true)?;
        }
        *self.inner.write() = next;
        self.generation.fetch_add(1, Ordering::Release);
        Ok(())
    }

    /// The function `name`: its library and definition.
    pub fn get(&self, name: &[u8]) -> Option<(Arc<Library>, FnDef)> {
        let name = std::str::from_utf8(name).ok()?.to_ascii_lowercase();
        let inner = self.inner.read();
        inner.fns.get(&name).map(|(lib, i)| (lib.clone(), lib.functions[*i].clone()))
    }

    /// Every library, by name.
    pub fn libraries(&self) -> Vec<Arc<Library>> {
        self.inner.read().libs.values().cloned().collect()
    }

    /// Number of libraries and of functions (FUNCTION STATS).
    pub fn counts(&self) -> (usize, usize) {
        let inner = self.inner.read();
        (inner.libs.len(), inner.fns.len())
    }

    /// The change generation a VM compares its compiled functions with.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(name: &str) -> FnDef {
        FnDef { name: name.into(), description: None, flags: 0 }
    }

    #[test]
    fn metadata_as_valkey_reads_it() {
        let md = metadata(b"#!lua name=mylib\nreturn 1").unwrap();
        assert_eq!((md.engine.as_str(), md.name.as_str(), md.len), ("lua", "mylib", 16));
        assert_eq!(metadata(b"return 1").unwrap_err(), "Missing library metadata");
        assert_eq!(metadata(b"#!lua name=x").unwrap_err(), "Invalid library metadata");
        assert_eq!(metadata(b"#!lua\n").unwrap_err(), "Library name was not given");
        assert_eq!(metadata(b"#!lua foo=bar\n").unwrap_err(), "Invalid metadata value given: foo=bar");
        assert_eq!(
            metadata(b"#!lua name=a name=b\n").unwrap_err(),
            "Invalid metadata value, name argument was given multiple times"
        );
        assert_eq!(metadata(b"#!lua name=bad-name\n").unwrap_err(), NAME_RULE);
        assert_eq!(metadata(b"#!bad_engine name=x\n").unwrap_err(), "Engine 'bad_engine' not found");
    }

    #[test]
    fn libraries_own_their_functions() {
        let f = Functions::default();
        let g0 = f.generation();
        assert_eq!(f.load(b"#!lua name=l1\n", false, |_, _| Ok(vec![def("f1"), def("f2")])).unwrap(), "l1");
        assert_ne!(f.generation(), g0);
        assert_eq!(
            f.load(b"#!lua name=l1\n", false, |_, _| Ok(vec![def("x")])).unwrap_err(),
            "Library 'l1' already exists"
        );
        assert_eq!(
            f.load(b"#!lua name=l2\n", false, |_, _| Ok(vec![def("f1")])).unwrap_err(),
            "Function f1 already exists"
        );
        assert_eq!(f.load(b"#!lua name=l2\n", false, |_, _| Ok(vec![])).unwrap_err(), "No functions registered");
        f.load(b"#!lua name=l1\n", true, |_, _| Ok(vec![def("f3")])).unwrap();
        assert!(f.get(b"f1").is_none(), "replacing a library drops its old functions");
        assert_eq!(f.get(b"f3").unwrap().0.name, "l1");
        assert_eq!(f.get(b"F3").unwrap().1.name, "f3", "names are found whatever their case");
        assert!(f.delete("l1"));
        assert!(!f.delete("l1"));
        assert_eq!(f.counts(), (0, 0));
    }

    #[test]
    fn restore_policies() {
        let f = Functions::default();
        f.load(b"#!lua name=a\n", false, |_, _| Ok(vec![def("fa")])).unwrap();
        let codes = vec![b"#!lua name=a\n".to_vec(), b"#!lua name=b\n".to_vec()];
        let compile = |c: &[u8], _: &Metadata| Ok(vec![def(if c.ends_with(b"a\n") { "fa" } else { "fb" })]);
        assert_eq!(f.restore(&codes, RestorePolicy::Append, compile).unwrap_err(), "Library a already exists");
        assert_eq!(f.counts(), (1, 1), "a failed restore changes nothing");
        f.restore(&codes, RestorePolicy::Replace, compile).unwrap();
        assert_eq!(f.counts(), (2, 2));
        f.restore(&codes[1..], RestorePolicy::Flush, compile).unwrap();
        assert_eq!(f.counts(), (1, 1));
    }
}
