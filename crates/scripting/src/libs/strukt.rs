//! placeholder

use mlua::{Lua, Table};

use super::Wrappers;

pub(crate) fn module(lua: &Lua, _w: &Wrappers) -> mlua::Result<Table> {
    lua.create_table()
}
