//! Configuration: the directive table, typed values, and the loaders that feed them.
//!
//! Only this crate knows directive names; sub-crates receive plain settings structs.

pub mod table;
pub mod value;

use table::{DirId, TABLE};
use value::Value;

/// Every directive's current value, indexed by [`DirId`].
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    values: Vec<Value>,
}

impl Settings {
    /// All defaults, parsed from the table's default texts.
    pub fn defaults() -> Settings {
        let values = TABLE
            .iter()
            .map(|d| {
                let args: Vec<String> = hotkv_protocol::split_args(d.default.as_bytes())
                    .unwrap_or_default()
                    .into_iter()
                    .map(|a| String::from_utf8_lossy(&a).into_owned())
                    .collect();
                let args = match d.ty {
                    value::Ty::List => args,
                    _ => vec![args.join(" ")],
                };
                value::parse(d.ty, &args).unwrap_or_else(|e| panic!("default of {} does not parse: {e}", d.name))
            })
            .collect();
        Settings { values }
    }

    /// The value of directive `id`.
    pub fn get(&self, id: DirId) -> &Value {
        &self.values[id]
    }

    /// Replaces the value of directive `id` (already validated).
    pub fn set(&mut self, id: DirId, v: Value) {
        self.values[id] = v;
    }

    /// An integer or memory directive.
    pub fn int(&self, id: DirId) -> i64 {
        self.values[id].as_int()
    }

    /// A yes/no directive.
    pub fn bool(&self, id: DirId) -> bool {
        self.values[id].as_bool()
    }

    /// A string or enum directive.
    pub fn str(&self, id: DirId) -> &str {
        self.values[id].as_str()
    }

    /// A list directive.
    pub fn list(&self, id: DirId) -> &[String] {
        self.values[id].as_list()
    }

    /// The text CONFIG GET shows for directive `id`.
    pub fn display(&self, id: DirId) -> String {
        value::format(TABLE[id].ty, &self.values[id])
    }
}
