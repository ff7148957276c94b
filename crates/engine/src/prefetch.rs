//! Cache prefetch hints, so a pipelined batch can start the memory loads of all its commands
//! before it runs the first one (memory-level parallelism instead of one miss at a time).
//!
//! The second and last module that allows `unsafe`: `_mm_prefetch` takes a raw pointer. A
//! prefetch never faults and has no effect on program semantics, whatever the address.
#![allow(unsafe_code)]

/// Asks the CPU to bring the cache line at `addr` into the cache. Any address is fine.
#[inline]
pub fn read(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch is a hint; it does not access memory in the abstract machine and the
    // hardware never faults on it, so any address, even dangling, is sound.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(addr as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}
