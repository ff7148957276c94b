//! Rule language and check tests against the real command registry.

use hotkv_protocol::Args;

use super::rules::{ChannelArgs, Env, Reason, User};
use crate::registry::{Lookup, Registry};

fn reg() -> Registry {
    Registry::new(crate::cmd::commands())
}

fn env(reg: &Registry) -> Env<'_> {
    Env { reg, all_channels_default: false }
}

fn user(reg: &Registry, rules: &str) -> User {
    let mut u = User::new("u", &env(reg));
    let ops: Vec<Vec<u8>> = rules.split(' ').filter(|s| !s.is_empty()).map(|s| s.as_bytes().to_vec()).collect();
    u.apply_all(&ops, &env(reg)).unwrap();
    u
}

fn check(reg: &Registry, u: &User, call: &[&str], chans: ChannelArgs) -> Result<(), (Reason, usize)> {
    let argv: Vec<Vec<u8>> = call.iter().map(|a| a.as_bytes().to_vec()).collect();
    let (flat, spans) = crate::dispatch::flatten(&argv);
    let args = Args::from_parts(&flat, &spans);
    let Lookup::Found(id) = reg.lookup(&args) else { panic!("unknown command {call:?}") };
    u.check(reg.get(id), &args, chans).map_err(|d| (d.reason, d.pos))
}

#[test]
fn new_users_and_default_describe_as_valkey() {
    let reg = reg();
    assert_eq!(User::new("x", &env(&reg)).describe(), "off sanitize-payload resetchannels -@all");
    assert_eq!(User::default_user(&env(&reg)).describe(), "on nopass sanitize-payload ~* &* +@all");
    let u = user(&reg, "on >pw ~obj:* %R~read:* &chan +get -@all +set +config|get +select|0 (~x +del)");
    let hash = super::rules::hash_password(b"pw");
    assert_eq!(
        u.describe(),
        format!(
            "on sanitize-payload #{hash} ~obj:* %R~read:* resetchannels &chan -@all +set +config|get +select|0 (~x resetchannels -@all +del)"
        )
    );
}

#[test]
fn a_later_rule_replaces_an_earlier_one_for_the_same_command() {
    let reg = reg();
    let u = user(&reg, "+@all -config|get -config +get -get");
    assert_eq!(u.selectors()[0].command_rules(), "+@all -config -get");
}

#[test]
fn commands_keys_and_channels_are_checked() {
    let reg = reg();
    let u = user(&reg, "on nopass ~foo:* %R~ro:* %W~wo:* &news.* +@all -flushall");
    assert_eq!(check(&reg, &u, &["get", "foo:1"], ChannelArgs::None), Ok(()));
    assert_eq!(check(&reg, &u, &["get", "bar"], ChannelArgs::None), Err((Reason::Key, 1)));
    assert_eq!(check(&reg, &u, &["get", "ro:1"], ChannelArgs::None), Ok(()));
    assert_eq!(check(&reg, &u, &["set", "ro:1", "v"], ChannelArgs::None), Err((Reason::Key, 1)));
    assert_eq!(check(&reg, &u, &["set", "wo:1", "v"], ChannelArgs::None), Ok(()));
    assert_eq!(check(&reg, &u, &["get", "wo:1"], ChannelArgs::None), Err((Reason::Key, 1)));
    assert_eq!(check(&reg, &u, &["flushall"], ChannelArgs::None), Err((Reason::Command, 0)));
    assert_eq!(check(&reg, &u, &["publish", "news.a", "m"], ChannelArgs::Publish), Ok(()));
    assert_eq!(check(&reg, &u, &["publish", "other", "m"], ChannelArgs::Publish), Err((Reason::Channel, 1)));
    // A PSUBSCRIBE pattern must equal an allowed pattern.
    assert_eq!(check(&reg, &u, &["psubscribe", "news.*"], ChannelArgs::PatternSubscribe), Ok(()));
    assert_eq!(check(&reg, &u, &["psubscribe", "news.a*"], ChannelArgs::PatternSubscribe), Err((Reason::Channel, 1)));
}

#[test]
fn selectors_widen_and_the_worst_refusal_is_reported() {
    let reg = reg();
    let u = user(&reg, "on nopass +get ~a (+set ~b)");
    assert_eq!(check(&reg, &u, &["get", "a"], ChannelArgs::None), Ok(()));
    assert_eq!(check(&reg, &u, &["set", "b", "v"], ChannelArgs::None), Ok(()));
    assert_eq!(check(&reg, &u, &["set", "a", "v"], ChannelArgs::None), Err((Reason::Key, 1)));
    assert_eq!(check(&reg, &u, &["del", "a"], ChannelArgs::None), Err((Reason::Command, 0)));
}

#[test]
fn first_args_and_subcommands() {
    let reg = reg();
    let u = user(&reg, "on nopass allkeys -@all +select|0 +config|get");
    assert_eq!(check(&reg, &u, &["select", "0"], ChannelArgs::None), Ok(()));
    assert_eq!(check(&reg, &u, &["select", "1"], ChannelArgs::None), Err((Reason::Command, 0)));
    assert_eq!(check(&reg, &u, &["config", "get", "port"], ChannelArgs::None), Ok(()));
    assert_eq!(check(&reg, &u, &["config", "set", "port", "1"], ChannelArgs::None), Err((Reason::Command, 0)));
}

#[test]
fn bad_rules_are_refused_with_valkeys_words_and_change_nothing() {
    let reg = reg();
    let e = env(&reg);
    let mut u = user(&reg, "on +get");
    let before = u.clone();
    let err = |u: &mut User, rules: &[&str]| {
        let ops: Vec<Vec<u8>> = rules.iter().map(|s| s.as_bytes().to_vec()).collect();
        u.apply_all(&ops, &e).unwrap_err()
    };
    assert_eq!(
        err(&mut u, &["+set", "+nosuchcommand"]),
        "Error in ACL SETUSER modifier '+nosuchcommand': Unknown command or category name in ACL"
    );
    assert_eq!(err(&mut u, &["bogus"]), "Error in ACL SETUSER modifier 'bogus': Syntax error");
    assert_eq!(
        err(&mut u, &["+@nosuch"]),
        "Error in ACL SETUSER modifier '+@nosuch': Unknown command or category name in ACL"
    );
    assert_eq!(
        err(&mut u, &["#abc"]),
        "Error in ACL SETUSER modifier '#abc': The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters"
    );
    assert_eq!(
        err(&mut u, &["<nope"]),
        "Error in ACL SETUSER modifier '<nope': The password you are trying to remove from the user does not exist"
    );
    assert_eq!(
        err(&mut u, &["+config|get|x"]),
        "Error in ACL SETUSER modifier '+config|get|x': Allowing first-arg of a subcommand is not supported"
    );
    assert_eq!(err(&mut u, &["%X~x"]), "Error in ACL SETUSER modifier '%X~x': Syntax error");
    assert_eq!(err(&mut u, &["(+get", "~x"]), "Unmatched parenthesis in acl selector starting at '(+get'.");
    assert!(err(&mut u, &["allkeys", "~x"]).ends_with("Try 'resetkeys' to start with an empty list of patterns"));
    assert_eq!(u, before);
}

#[test]
fn passwords_hash_and_reset() {
    let reg = reg();
    let u = user(&reg, "on >secret");
    assert!(u.password_matches(b"secret") && !u.password_matches(b"other"));
    let u = user(&reg, "on >secret resetpass");
    assert!(!u.password_matches(b"secret"));
    let u = user(&reg, "on >secret nopass");
    assert!(u.password_matches(b"anything") && u.passwords().is_empty());
}

#[test]
fn acl_files_report_every_bad_line() {
    let reg = reg();
    let e = env(&reg);
    let users = super::file::parse(b"user alice on >p ~* +@all\n\nuser bob off\n", "f.acl", &e).unwrap();
    assert_eq!(users.iter().map(|u| u.name.as_str()).collect::<Vec<_>>(), ["alice", "bob", "default"]);
    let err =
        super::file::parse(b"user a +nosuch\nnotuser x\nuser a on\nuser b bogus junk\n", "f.acl", &e).unwrap_err();
    assert_eq!(
        err,
        "f.acl:1: Error in applying operation '+nosuch': Unknown command or category name in ACL. \
         f.acl:2 should start with user keyword followed by the username. \
         WARNING: Duplicate user 'a' found on line 3. \
         f.acl:4: Syntax error. \
         WARNING: ACL errors detected, no change to the previously active ACL rules was performed"
    );
}

/// SORT's BY and GET patterns need a selector that allows the call and may read every key
/// (Valkey's `ACLUserCheckCmdWithUnrestrictedKeyAccess`).
#[test]
fn reading_every_key_takes_a_selector_that_allows_the_call() {
    let reg = reg();
    let reads = |rules: &str, call: &[&str]| {
        let u = user(&reg, rules);
        let argv: Vec<Vec<u8>> = call.iter().map(|a| a.as_bytes().to_vec()).collect();
        let (flat, spans) = crate::dispatch::flatten(&argv);
        let args = Args::from_parts(&flat, &spans);
        let Lookup::Found(id) = reg.lookup(&args) else { panic!("unknown command {call:?}") };
        u.reads_every_key(reg.get(id), &args, ChannelArgs::None)
    };
    let call = ["sort", "mylist", "BY", "v*"];
    assert!(reads("on nopass allkeys +sort", &call));
    assert!(reads("on nopass (+sort ~mylist %R~*)", &call));
    assert!(reads("on nopass (+sort %RW~*)", &call));
    assert!(!reads("on nopass (+sort ~mylist)", &call));
    assert!(!reads("on nopass (+sort ~mylist ~v*)", &call));
    assert!(!reads("on nopass (+sort ~mylist %W~*)", &call));
    assert!(!reads("on nopass (+get %R~*) (+sort ~mylist)", &call), "the selector that reads all may not sort");
    let store = ["sort", "mylist", "BY", "v*", "STORE", "dst"];
    assert!(!reads("on nopass (+sort %R~*)", &store), "nor one that may not write the destination");
    assert!(reads("on nopass (+sort %R~* %W~dst)", &store));
}
