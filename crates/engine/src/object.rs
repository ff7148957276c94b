//! Values that do not live inline in their entry.

/// A boxed value. Strings normally live inline in the entry; they become an object when they
/// are edited in place (APPEND, SETRANGE), which keeps spare capacity like Valkey's raw
/// strings, or when they are too long for an inline length.
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    /// A string with room to grow.
    Str(Vec<u8>),
}

impl Object {
    /// The type name TYPE reports.
    pub fn type_name(&self) -> &'static str {
        match self {
            Object::Str(_) => "string",
        }
    }

    /// Heap bytes owned by the object beyond the entry, for MEMORY USAGE and eviction.
    pub fn heap_size(&self) -> usize {
        match self {
            Object::Str(v) => std::mem::size_of::<Object>() + v.capacity(),
        }
    }
}
