//! The `hotkv` binary.

fn main() {
    std::process::exit(hotkv_server::main());
}
