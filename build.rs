//! Exports the binary's symbols in its dynamic symbol table (`-rdynamic`), so that the crash
//! report's stack trace, which a signal handler writes with glibc's `backtrace_symbols_fd`
//! (it cannot read debug info safely there), names functions instead of bare offsets.

fn main() {
    println!("cargo:rustc-link-arg-bins=-rdynamic");
}
