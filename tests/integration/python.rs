//! redis-py against hotkv: the everyday API, INFO parsing, RESP3, and client introspection.

use hotkv_test_support::tools::python;

use crate::server;

#[test]
fn redis_py_everyday_usage() {
    let srv = server();
    let out = python(
        srv.port(),
        r#"
r = redis.Redis(port=PORT, decode_responses=True)
print(r.ping())
print(r.set("k", "v"), r.get("k"), r.get("missing"))
print(r.incr("n"), r.incrby("n", 5), r.decr("n"))
print(r.mset({"a": "1", "b": "2"}), r.mget("a", "b", "c"))
print(r.exists("a", "b", "c"), r.delete("a", "c"))
print(r.set("t", "x", px=100000), 0 < r.pttl("t") <= 100000, r.ttl("missing"))
print(r.expire("k", 100), r.persist("k"), r.ttl("k"))
p = r.pipeline(transaction=False)
for i in range(10):
    p.set(f"p{i}", i)
p.get("p9")
print(p.execute()[-1])
print(sorted(r.scan_iter(match="p*", count=3))[:3])
print(r.type("k"), r.strlen("k"), r.append("k", "w"), r.getrange("k", 0, 0))
"#,
    );
    let expected = "True\n\
                    True v None\n\
                    1 6 5\n\
                    True ['1', '2', None]\n\
                    2 1\n\
                    True True -2\n\
                    True True -1\n\
                    9\n\
                    ['p0', 'p1', 'p2']\n\
                    string 1 2 v\n";
    assert_eq!(out, expected);
}

#[test]
fn redis_py_parses_info() {
    let srv = server();
    let out = python(
        srv.port(),
        r#"
r = redis.Redis(port=PORT, decode_responses=True)
info = r.info()
print(type(info["redis_version"]).__name__, info["cluster_enabled"], info["role"])
print(r.info("keyspace"))
r.set("k", "v")
print(r.info("keyspace"))
print(r.dbsize(), "used_memory" in r.info("memory"))
"#,
    );
    assert_eq!(out, "str 0 master\n{}\n{'db0': {'keys': 1, 'expires': 0, 'avg_ttl': 0}}\n1 True\n");
}

#[test]
fn redis_py_speaks_resp3() {
    let srv = server();
    let out = python(
        srv.port(),
        r#"
r = redis.Redis(port=PORT, protocol=3, decode_responses=True)
print(r.set("k", "v"), r.get("k"), r.get("missing"))
# HELLO without a version reports the protocol this connection negotiated.
print(r.execute_command("HELLO")["proto"])
"#,
    );
    assert_eq!(out, "True v None\n3\n");
}

#[test]
fn redis_py_client_and_config_helpers() {
    let srv = server();
    let out = python(
        srv.port(),
        r#"
r = redis.Redis(port=PORT, decode_responses=True)
print(r.client_setname("py-client"), r.client_getname())
print([c["name"] for c in r.client_list() if c["name"]])
print(r.config_get("maxmemory"))
print(r.config_set("maxmemory", "5mb"), r.config_get("maxmemory"))
"#,
    );
    assert_eq!(out, "True py-client\n['py-client']\n{'maxmemory': '0'}\nTrue {'maxmemory': '5242880'}\n");
}
