//! Scripts as client libraries run them: redis-py's `Lock` (its release, extend and reacquire
//! are EVALSHA of registered scripts, reloaded after a NOSCRIPT) against a standalone server
//! and against a three-primary cluster through `RedisCluster`, and a job queue's "take the
//! next job" script (BullMQ / RQ style: several keys under one hash tag, a lease key built
//! inside the script) run by concurrent workers while a producer pushes jobs.

use std::time::Duration;

use hotkv_test_support::tools::python;
use hotkv_test_support::{TestServer, wait_for};

use crate::cluster::{cluster_state, create, nodes, one_cluster_at_a_time};
use crate::server;

#[test]
fn python_lock_acquire_extend_reacquire_release_standalone() {
    let srv = server();
    let out = python(
        srv.port(),
        &format!("r = redis.Redis(port=PORT, socket_timeout=5, socket_connect_timeout=5)\n{LOCK_SCENARIO}"),
    );
    assert_eq!(out, LOCK_EXPECTED);
}

#[test]
fn python_script_load_of_a_cached_script_answers_its_sha() {
    // redis-py's Script loads its body again on every NOSCRIPT, and RedisCluster loads it on
    // every primary: workers starting together load the same body several times, and a body
    // EVAL already cached may be loaded too. Each load must answer, not hang the server.
    let srv = server();
    let out = python(
        srv.port(),
        r#"
r = redis.Redis(port=PORT, socket_timeout=5, socket_connect_timeout=5)
sha = r.script_load("return 'loaded'")
print(r.script_load("return 'loaded'") == sha, r.evalsha(sha, 0))
r.eval("return 'by eval'", 0)
sha = r.script_load("return 'by eval'")
print(r.evalsha(sha, 0), r.ping())
"#,
    );
    assert_eq!(out, "True b'loaded'\nb'by eval' True\n");
}

#[test]
fn python_lock_acquire_extend_reacquire_release_on_a_cluster() {
    let _alone = one_cluster_at_a_time();
    let ns = three_primaries();
    let out = python(
        ns[0].port(),
        &format!(
            "from redis.cluster import RedisCluster\n\
             r = RedisCluster(host='127.0.0.1', port=PORT, socket_timeout=5, socket_connect_timeout=5)\n\
             {LOCK_SCENARIO}"
        ),
    );
    assert_eq!(out, LOCK_EXPECTED);
}

#[test]
fn python_job_queue_script_takes_every_job_exactly_once_on_a_cluster() {
    let _alone = one_cluster_at_a_time();
    let ns = three_primaries();
    let out = python(ns[0].port(), JOB_QUEUE);
    assert_eq!(
        out,
        "queues on 3 primaries\n\
         errors [] stuck False\n\
         taken 2000 distinct 2000 all True\n\
         waiting 0 active 0 leases 0 taken-counters 2000\n"
    );
}

/// Three cluster nodes with all slots spread over them, no replicas, `cluster_state:ok` on
/// each.
fn three_primaries() -> Vec<TestServer> {
    let ns = nodes(3, &[]);
    create(&ns, 0);
    assert!(wait_for(|| ns.iter().all(|n| cluster_state(n) == "ok"), Duration::from_secs(10)), "cluster never ok");
    ns
}

/// redis-py's `Lock` on three lock names, one per primary in a cluster (any three names on a
/// standalone server), then four threads doing read-modify-write under one lock. Expects `r`,
/// the client. Each printed line is one name's results; see LOCK_EXPECTED.
const LOCK_SCENARIO: &str = r#"
import threading, time
from redis.exceptions import LockNotOwnedError

def names():
    # One lock per primary in a cluster, so the scripts run on every node.
    if not hasattr(r, "get_node_from_key"):
        return ["lock:a", "lock:b", "lock:c"]
    out, seen = [], set()
    for i in range(1000):
        n = f"lock:{i}"
        node = r.get_node_from_key(n).name
        if node not in seen:
            seen.add(node)
            out.append(n)
    assert len(out) == 3, out
    return out

def wait(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError("condition never held")
        time.sleep(0.01)

def not_owned(f):
    try:
        f()
        return "done"
    except LockNotOwnedError:
        return "not-owned"

def scenario(name):
    out = []
    a = r.lock(name, timeout=5, blocking_timeout=1, sleep=0.01)
    b = r.lock(name, timeout=5, blocking_timeout=0.2, sleep=0.01)
    out.append(a.acquire())
    out.append(0 < r.pttl(name) <= 5000)
    # b waits its blocking_timeout for a held lock, then gives up.
    t0 = time.monotonic()
    out.append(b.acquire())
    out.append(0.1 < time.monotonic() - t0 < 3)
    out.append(a.owned() and not b.owned())
    # A flushed script cache: the next EVALSHA gets NOSCRIPT and redis-py loads the script again.
    r.script_flush()
    out.append(a.extend(10))
    out.append(10000 < r.pttl(name) <= 15000)
    out.append(a.extend(2, replace_ttl=True))
    out.append(0 < r.pttl(name) <= 2000)
    out.append(a.reacquire())
    out.append(2000 < r.pttl(name) <= 5000)
    # Another token can neither release, extend nor reacquire it, and the lock stays a's.
    for f in (b.release, lambda: b.extend(1), b.reacquire):
        b.local.token = b"someone-else"
        out.append(not_owned(f))
    out.append(r.get(name) == a.local.token)
    a.release()
    out.append(r.exists(name))
    # A lock that expired and was taken by another: the late release must not free it.
    late = r.lock(name, timeout=0.1)
    out.append(late.acquire(blocking=False))
    wait(lambda: not r.exists(name))
    other = r.lock(name, timeout=5, blocking_timeout=1)
    out.append(other.acquire())
    out.append(not_owned(late.release))
    out.append(r.get(name) == other.local.token)
    other.release()
    out.append(r.exists(name))
    return out

for name in names():
    print(*scenario(name))

# Mutual exclusion: a read-modify-write with a pause inside loses updates unless the lock
# really excludes the other threads.
counter, errors = "lock:counter", []
r.delete(counter)
def work():
    try:
        for _ in range(25):
            with r.lock("lock:mutex", timeout=5, blocking_timeout=10, sleep=0.002):
                v = int(r.get(counter) or 0)
                time.sleep(0.001)
                r.set(counter, v + 1)
    except Exception as e:
        errors.append(repr(e))
threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join(timeout=20)
print("counter", int(r.get(counter)), "errors", errors, "stuck", any(t.is_alive() for t in threads))
"#;

/// What LOCK_SCENARIO prints when every step behaves as on Valkey.
const LOCK_EXPECTED: &str = "\
True True False True True True True True True True True not-owned not-owned not-owned True 0 True True not-owned True 0
True True False True True True True True True True True not-owned not-owned not-owned True 0 True True not-owned True 0
True True False True True True True True True True True not-owned not-owned not-owned True 0 True True not-owned True 0
counter 100 errors [] stuck False
";

/// A job queue on a cluster, as BullMQ and RQ keep one: per queue, a waiting list, an active
/// list, a counter hash and per-job lease keys, all under the queue's hash tag. Three queues,
/// one per primary. A producer thread pushes 2000 jobs round-robin while four worker threads
/// take jobs with the MOVE script (LMOVE waiting -> active, SET the lease PX, count) and
/// finish them with the DONE script (check the lease is theirs, LREM, DEL). Every job must be
/// taken exactly once: a non-atomic move would hand one job to two workers or lose one.
const JOB_QUEUE: &str = r#"
import threading, time
from redis.cluster import RedisCluster

rc = RedisCluster(host='127.0.0.1', port=PORT, socket_timeout=5, socket_connect_timeout=5)

# KEYS: waiting, active, counters, lease prefix (declared for its slot; the lease key itself
# is built from it, undeclared, as BullMQ builds `<job key>:lock`). ARGV: worker, lease ms.
MOVE = rc.register_script("""
local id = redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
if not id then return false end
redis.call('SET', KEYS[4] .. id, ARGV[1], 'PX', ARGV[2])
redis.call('HINCRBY', KEYS[3], 'taken', 1)
return id
""")
# KEYS: active, lease prefix. ARGV: job, worker. The lease's remaining ms, or an error.
DONE = rc.register_script("""
local lease = KEYS[2] .. ARGV[1]
if redis.call('GET', lease) ~= ARGV[2] then
  return redis.error_reply('lease of ' .. ARGV[1] .. ' is not held by ' .. ARGV[2])
end
local ttl = redis.call('PTTL', lease)
redis.call('DEL', lease)
if redis.call('LREM', KEYS[1], 1, ARGV[1]) ~= 1 then
  return redis.error_reply(ARGV[1] .. ' was not active')
end
return ttl
""")

LEASE_MS, JOBS, WORKERS = 30000, 2000, 4

def queue_tags():
    # One queue per primary, so every node runs the scripts under load.
    tags, seen = [], set()
    for i in range(1000):
        node = rc.get_node_from_key(f"{{q{i}}}:waiting").name
        if node not in seen:
            seen.add(node)
            tags.append(f"{{q{i}}}")
    return tags

tags = queue_tags()
print("queues on", len(tags), "primaries")
keys = {t: [f"{t}:waiting", f"{t}:active", f"{t}:counters", f"{t}:lease:"] for t in tags}
for t in tags:
    rc.delete(*keys[t][:3])

taken = [[] for _ in range(WORKERS)]
errors = []
produced = threading.Event()
deadline = time.monotonic() + 20

def producer():
    try:
        for i in range(JOBS):
            rc.lpush(keys[tags[i % len(tags)]][0], f"job:{i}")
    except Exception as e:
        errors.append("producer " + repr(e))
    produced.set()

def worker(w):
    name = f"worker-{w}"
    try:
        while time.monotonic() < deadline:
            # A sweep that starts after the producer finished and finds every queue empty
            # means no job is left: all were pushed before the event was set.
            finished = produced.is_set()
            got = False
            for t in tags[w % len(tags):] + tags[:w % len(tags)]:
                waiting, active, counters, lease = keys[t]
                job = MOVE(keys=[waiting, active, counters, lease], args=[name, LEASE_MS])
                if job is None:
                    continue
                got = True
                job = job.decode()
                taken[w].append(job)
                ttl = DONE(keys=[active, lease], args=[job, name])
                if not 0 < ttl <= LEASE_MS:
                    errors.append(f"{job}: lease ttl {ttl}")
            if got:
                continue
            if finished:
                return
            time.sleep(0.001)
        errors.append(f"{name} ran out of time")
    except Exception as e:
        errors.append(f"{name} {e!r}")

threads = [threading.Thread(target=producer)] + [threading.Thread(target=worker, args=(w,)) for w in range(WORKERS)]
for t in threads:
    t.start()
for t in threads:
    t.join(timeout=max(0.1, deadline - time.monotonic() + 5))
print("errors", errors, "stuck", any(t.is_alive() for t in threads))
every = [j for per in taken for j in per]
print("taken", len(every), "distinct", len(set(every)), "all", set(every) == {f"job:{i}" for i in range(JOBS)})
lens = lambda i: sum(rc.llen(keys[t][i]) for t in tags)
leases = sum(rc.exists(f"{tags[i % len(tags)]}:lease:job:{i}") for i in range(JOBS))
counted = sum(int(rc.hget(keys[t][2], "taken") or 0) for t in tags)
print("waiting", lens(0), "active", lens(1), "leases", leases, "taken-counters", counted)
"#;
