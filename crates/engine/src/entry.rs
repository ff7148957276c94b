//! One key and its value in a single allocation, behind one thin pointer.
//!
//! This is the reason the engine allows `unsafe`: a table bucket holds 8 bytes, and a small
//! string key costs one allocation holding a 16-byte header, the key and the value
//! (16 + 16 + 32 = 64 bytes for the 16-byte-key/32-byte-value case, exactly one jemalloc
//! size class). A `Box<[u8]>` would double the bucket, and separate key and value
//! allocations would add two headers and a pointer chase on every lookup. All raw pointer
//! work is confined to this file, behind a safe API.
//!
//! Collections keep their [`Object`] (32 bytes) inside the entry too, not behind a second
//! pointer: a 13-byte key with a small hash or sorted set costs one 64-byte allocation plus
//! the collection's own buffer, where a boxed object cost 48 + 32 bytes and one more cache
//! miss per access.
//!
//! Layout (8-byte aligned):
//!
//! ```text
//! Header { hash: u32, klen: u32, vlen: u32, meta: u32 }
//! [expire: i64]            only when META_VOLATILE is set: no cost for keys without a TTL
//! [object: Object]         only when META_OBJECT is set
//! key bytes
//! [string bytes]           only for an inline string (vlen bytes)
//! ```
#![allow(unsafe_code)]

use std::alloc::{Layout, alloc, dealloc, handle_alloc_error, realloc};
use std::fmt;
use std::ptr::{self, NonNull};

use crate::object::Object;

/// The value of an entry, borrowed.
#[derive(Clone, Copy)]
pub enum ValueRef<'a> {
    /// A string stored inline with the key.
    Str(&'a [u8]),
    /// Any other value (including strings that grew by APPEND/SETRANGE).
    Obj(&'a Object),
}

/// A value to store.
pub enum NewValue<'a> {
    /// String bytes, stored inline when they fit a `u32` length.
    Bytes(&'a [u8]),
    /// Any other value, moved into the entry.
    Object(Object),
}

#[repr(C)]
struct Header {
    hash: u32,
    klen: u32,
    vlen: u32,
    meta: u32,
}

const HDR: usize = std::mem::size_of::<Header>();
/// Room an inline object takes; a multiple of 8, so the key after it needs no padding.
const OBJECT: usize = std::mem::size_of::<Object>();
const _: () = assert!(OBJECT.is_multiple_of(8) && std::mem::align_of::<Object>() <= 8);
const LRU_MASK: u32 = 0x00FF_FFFF;
const META_OBJECT: u32 = 1 << 24;
const META_VOLATILE: u32 = 1 << 25;

/// An owned key/value pair. Dropping it frees the allocation and the object it owns.
pub struct Entry {
    ptr: NonNull<Header>,
}

// SAFETY: an Entry uniquely owns its allocation and the Object it points to (which is Send
// and Sync: plain owned data); nothing else aliases them.
unsafe impl Send for Entry {}
// SAFETY: shared access only reads through the pointer.
unsafe impl Sync for Entry {}

impl Entry {
    /// Builds an entry. `hash` is the table hash of `key`; `lru` the initial access clock.
    pub fn new(key: &[u8], hash: u32, value: NewValue<'_>, expire: Option<i64>, lru: u32) -> Entry {
        let value = match value {
            NewValue::Bytes(b) if b.len() > u32::MAX as usize => NewValue::Object(Object::Str(b.to_vec())),
            v => v,
        };
        let klen = u32::try_from(key.len()).expect("keys are limited by proto-max-bulk-len");
        let (object, vlen) = match &value {
            NewValue::Bytes(b) => (false, b.len()),
            NewValue::Object(_) => (true, 0),
        };
        let shape = Shape { volatile: expire.is_some(), object, klen: klen as usize, vlen };
        let layout = shape.layout();
        // SAFETY: layout has non-zero size (at least the header).
        let raw = unsafe { alloc(layout) };
        let Some(ptr) = NonNull::new(raw.cast::<Header>()) else { handle_alloc_error(layout) };
        let mut meta = lru & LRU_MASK;
        if object {
            meta |= META_OBJECT;
        }
        if expire.is_some() {
            meta |= META_VOLATILE;
        }
        // SAFETY: the allocation is `shape.size()` bytes, 8-aligned; every write below stays
        // inside the offsets `shape` computes for exactly these lengths.
        unsafe {
            ptr.as_ptr().write(Header { hash, klen, vlen: vlen as u32, meta });
            if let Some(when) = expire {
                raw.add(HDR).cast::<i64>().write(when);
            }
            ptr::copy_nonoverlapping(key.as_ptr(), raw.add(shape.key_offset()), key.len());
            match value {
                NewValue::Bytes(b) => ptr::copy_nonoverlapping(b.as_ptr(), raw.add(shape.value_offset()), b.len()),
                NewValue::Object(o) => raw.add(shape.object_offset()).cast::<Object>().write(o),
            }
        }
        Entry { ptr }
    }

    /// The allocation's address, for prefetch hints only.
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// The key.
    pub fn key(&self) -> &[u8] {
        let s = self.shape();
        // SAFETY: the key lies at key_offset for klen bytes, initialised in `new`.
        unsafe { std::slice::from_raw_parts(self.base().add(s.key_offset()), s.klen) }
    }

    /// The table hash of the key, stored so growing a table never rehashes keys.
    pub fn hash(&self) -> u32 {
        self.header().hash
    }

    /// The absolute expire time in unix milliseconds, if the key has one.
    pub fn expire(&self) -> Option<i64> {
        if self.header().meta & META_VOLATILE == 0 {
            return None;
        }
        // SAFETY: volatile entries hold an aligned i64 right after the header.
        Some(unsafe { self.base().add(HDR).cast::<i64>().read() })
    }

    /// The value.
    pub fn value(&self) -> ValueRef<'_> {
        let s = self.shape();
        // SAFETY: offsets come from the shape this entry was built with.
        unsafe {
            if s.object {
                ValueRef::Obj(&*self.base().add(s.object_offset()).cast::<Object>())
            } else {
                ValueRef::Str(std::slice::from_raw_parts(self.base().add(s.value_offset()), s.vlen))
            }
        }
    }

    /// The object, for in-place changes; `None` for an inline string.
    pub fn object_mut(&mut self) -> Option<&mut Object> {
        let s = self.shape();
        if !s.object {
            return None;
        }
        // SAFETY: object entries hold an initialised Object at object_offset; &mut self is
        // unique.
        Some(unsafe { &mut *self.base().add(s.object_offset()).cast::<Object>() })
    }

    /// The inline string bytes, for same-length changes; `None` for an object.
    pub fn inline_mut(&mut self) -> Option<&mut [u8]> {
        let s = self.shape();
        if s.object {
            return None;
        }
        // SAFETY: the inline value lies at value_offset for vlen bytes; &mut self is unique.
        Some(unsafe { std::slice::from_raw_parts_mut(self.base().add(s.value_offset()), s.vlen) })
    }

    /// The 24-bit LRU clock or LFU state.
    pub fn lru(&self) -> u32 {
        self.header().meta & LRU_MASK
    }

    /// Sets the 24-bit LRU clock or LFU state.
    pub fn set_lru(&mut self, lru: u32) {
        let h = self.header_mut();
        h.meta = (h.meta & !LRU_MASK) | (lru & LRU_MASK);
    }

    /// Sets or clears the expire time, moving the entry when it gains or loses the field.
    pub fn set_expire(&mut self, expire: Option<i64>) {
        match (self.expire().is_some(), expire) {
            (true, Some(when)) => {
                // SAFETY: volatile entries hold an aligned i64 right after the header.
                unsafe { self.base().add(HDR).cast::<i64>().write(when) }
            }
            (false, None) => {}
            _ => self.rebuild(expire, None),
        }
    }

    /// Replaces the value, keeping key, expire and access clock.
    pub fn set_value(&mut self, value: NewValue<'_>) {
        let s = self.shape();
        match value {
            NewValue::Bytes(b) if !s.object && b.len() <= u32::MAX as usize => {
                self.resize_inline(b.len());
                if let Some(dst) = self.inline_mut() {
                    dst.copy_from_slice(b);
                }
                return;
            }
            NewValue::Object(o) if s.object => {
                if let Some(slot) = self.object_mut() {
                    *slot = o;
                }
                return;
            }
            _ => {}
        }
        let expire = self.expire();
        self.rebuild(expire, Some(value));
    }

    /// Bytes of the allocation (before allocator rounding), for memory accounting.
    pub fn alloc_size(&self) -> usize {
        self.shape().size()
    }

    fn resize_inline(&mut self, new_len: usize) {
        let old = self.shape();
        if old.vlen == new_len {
            return;
        }
        let new = Shape { vlen: new_len, ..old };
        // SAFETY: same alignment; new size non-zero; the prefix (header, expire, key) is
        // preserved by realloc and vlen is updated before anyone reads the value.
        unsafe {
            let raw = realloc(self.base(), old.layout(), new.size());
            let Some(ptr) = NonNull::new(raw.cast::<Header>()) else { handle_alloc_error(new.layout()) };
            self.ptr = ptr;
        }
        self.header_mut().vlen = new_len as u32;
    }

    /// Builds a new allocation with a different shape and swaps it in.
    fn rebuild(&mut self, expire: Option<i64>, value: Option<NewValue<'_>>) {
        let (lru, hash, s) = (self.lru(), self.hash(), self.shape());
        match value {
            Some(v) => *self = Entry::new(self.key(), hash, v, expire, lru),
            None if s.object => {
                // SAFETY: object entries hold an initialised Object. It is moved (bitwise)
                // into the new entry; the old allocation is then freed without dropping its
                // copy, so the object is dropped exactly once, by the new entry.
                let obj = unsafe { self.base().add(s.object_offset()).cast::<Object>().read() };
                let fresh = Entry::new(self.key(), hash, NewValue::Object(obj), expire, lru);
                let old = std::mem::ManuallyDrop::new(std::mem::replace(self, fresh));
                // SAFETY: the allocation was made with exactly `s.layout()` and nothing else
                // refers to it; its object was moved out above.
                unsafe { dealloc(old.base(), s.layout()) };
            }
            None => {
                let ValueRef::Str(bytes) = self.value() else { unreachable!("inline shape") };
                *self = Entry::new(self.key(), hash, NewValue::Bytes(bytes), expire, lru);
            }
        }
    }

    fn shape(&self) -> Shape {
        let h = self.header();
        Shape {
            volatile: h.meta & META_VOLATILE != 0,
            object: h.meta & META_OBJECT != 0,
            klen: h.klen as usize,
            vlen: h.vlen as usize,
        }
    }

    fn base(&self) -> *mut u8 {
        self.ptr.as_ptr().cast::<u8>()
    }

    fn header(&self) -> &Header {
        // SAFETY: ptr always points to an initialised header.
        unsafe { self.ptr.as_ref() }
    }

    fn header_mut(&mut self) -> &mut Header {
        // SAFETY: as above, and &mut self is unique.
        unsafe { self.ptr.as_mut() }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let s = self.shape();
        // SAFETY: an object entry holds an initialised Object, dropped here once (an entry
        // whose object was moved out is freed by `rebuild` without running this); the
        // allocation was made with exactly `s.layout()`.
        unsafe {
            if s.object {
                ptr::drop_in_place(self.base().add(s.object_offset()).cast::<Object>());
            }
            dealloc(self.base(), s.layout());
        }
    }
}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entry")
            .field("key", &String::from_utf8_lossy(self.key()))
            .field("expire", &self.expire())
            .finish()
    }
}

/// Sizes and offsets of an entry's parts.
#[derive(Clone, Copy)]
struct Shape {
    volatile: bool,
    object: bool,
    klen: usize,
    vlen: usize,
}

impl Shape {
    fn object_offset(self) -> usize {
        HDR + if self.volatile { 8 } else { 0 }
    }

    fn key_offset(self) -> usize {
        self.object_offset() + if self.object { OBJECT } else { 0 }
    }

    fn value_offset(self) -> usize {
        self.key_offset() + self.klen
    }

    fn size(self) -> usize {
        self.value_offset() + if self.object { 0 } else { self.vlen }
    }

    fn layout(self) -> Layout {
        Layout::from_size_align(self.size(), 8).expect("entry sizes are far below isize::MAX")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(e: &Entry) -> Vec<u8> {
        match e.value() {
            ValueRef::Str(b) => b.to_vec(),
            ValueRef::Obj(Object::Str(v)) => v.clone(),
            ValueRef::Obj(_) => unreachable!("these tests store strings only"),
        }
    }

    #[test]
    fn layout_is_compact() {
        let e = Entry::new(&[b'k'; 16], 7, NewValue::Bytes(&[b'v'; 32]), None, 0);
        assert_eq!(e.alloc_size(), 64);
        // A collection with a 16-byte key: header, object and key in one 64-byte class.
        let e = Entry::new(&[b'k'; 16], 7, NewValue::Object(Object::Str(vec![1])), None, 0);
        assert_eq!(e.alloc_size(), 64);
        let e = Entry::new(&[b'k'; 16], 7, NewValue::Bytes(&[b'v'; 32]), Some(1), 0);
        assert_eq!(e.alloc_size(), 72);
    }

    #[test]
    fn every_transition_keeps_key_value_and_ttl() {
        let mut e = Entry::new(b"key", 42, NewValue::Bytes(b"hello"), None, 5);
        assert_eq!((e.key(), e.hash(), e.expire(), e.lru()), (&b"key"[..], 42, None, 5));
        e.set_expire(Some(1000));
        assert_eq!((e.key(), s(&e), e.expire()), (&b"key"[..], b"hello".to_vec(), Some(1000)));
        e.set_value(NewValue::Bytes(b"a much longer value than before"));
        assert_eq!((e.key(), e.expire()), (&b"key"[..], Some(1000)));
        assert_eq!(s(&e), b"a much longer value than before");
        e.set_value(NewValue::Object(Object::Str(b"obj".to_vec())));
        assert_eq!((e.key(), s(&e), e.expire()), (&b"key"[..], b"obj".to_vec(), Some(1000)));
        e.set_expire(None);
        assert_eq!((e.key(), s(&e), e.expire()), (&b"key"[..], b"obj".to_vec(), None));
        e.set_expire(Some(7));
        assert_eq!((e.key(), s(&e), e.expire()), (&b"key"[..], b"obj".to_vec(), Some(7)));
        e.set_value(NewValue::Object(Object::Str(b"obj2".to_vec())));
        assert_eq!(s(&e), b"obj2");
        e.set_value(NewValue::Bytes(b"back inline"));
        assert_eq!((e.key(), s(&e), e.expire(), e.lru()), (&b"key"[..], b"back inline".to_vec(), Some(7), 5));
        e.inline_mut().unwrap()[0] = b'B';
        assert_eq!(s(&e), b"Back inline");
        e.set_lru(0xFFFF_FFFF);
        assert_eq!((e.lru(), e.expire()), (0x00FF_FFFF, Some(7)));
        e.set_value(NewValue::Bytes(b""));
        assert_eq!((e.key(), s(&e)), (&b"key"[..], Vec::new()));
    }
}
