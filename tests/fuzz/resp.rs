//! The RESP request decoder, fed as a connection feeds it: in chunks of any size, with the
//! consumed prefix discarded between commands.

use hotkv_protocol::{Decoder, Limits, Step};
use hotkv_test_support::fuzz::{Budget, Rng, peak_during, run};

/// One decoded stream: the commands, or where decoding stopped with an error.
#[derive(Debug, PartialEq)]
struct Outcome {
    commands: Vec<Vec<Vec<u8>>>,
    error: Option<String>,
}

/// Decodes `input` arriving in chunks whose sizes `rng` picks (all at once when `rng` is
/// `None`), checking the decoder's invariants at every step.
fn decode(input: &[u8], limits: Limits, mut rng: Option<&mut Rng>) -> Outcome {
    let mut dec = Decoder::new();
    let mut buf = Vec::new();
    let mut fed = 0;
    let mut out = Outcome { commands: Vec::new(), error: None };
    loop {
        match dec.next(&buf, limits) {
            Ok(Step::Command) => {
                let args = dec.args(&buf);
                assert!(!args.is_empty(), "a command has a name");
                out.commands.push(args.iter().map(<[u8]>::to_vec).collect());
            }
            Ok(Step::Empty) => {}
            Ok(Step::Incomplete) => {
                // What the reader would reserve is bounded by what the client may send.
                let want = dec.wanted_capacity();
                assert!(
                    want == 0
                        || want as u64 <= (buf.len() as u64).saturating_add(limits.max_bulk_len).saturating_add(2),
                    "wanted {want} with {} buffered",
                    buf.len()
                );
                if fed == input.len() {
                    return out;
                }
                let n = match rng.as_deref_mut() {
                    Some(r) => 1 + r.below(input.len() - fed),
                    None => input.len() - fed,
                };
                let drop = dec.discard_consumed();
                buf.drain(..drop);
                buf.extend_from_slice(&input[fed..fed + n]);
                fed += n;
            }
            Err(e) => {
                out.error = Some(e.to_string());
                return out;
            }
        }
    }
}

#[test]
fn resp_decoder_survives_mutated_requests() {
    let seeds = crate::seeds("resp");
    let mut chunks = Rng::new(99);
    let limits = [
        Limits::default(),
        Limits { max_bulk_len: 1 << 20, auth_required: false },
        Limits { max_bulk_len: u64::MAX, auth_required: false },
        Limits { auth_required: true, ..Limits::default() },
    ];
    let mut which = 0;
    run("resp", &seeds, Budget::from_env(200_000), |input, tally| {
        which = (which + 1) % limits.len();
        let l = limits[which];
        let (whole, peak) = peak_during(|| decode(input, l, None));
        tally.max_peak = tally.max_peak.max(peak);
        // Spans and inline scratch grow with the input, never with a declared count or length.
        assert!(peak <= 64 * input.len() + (64 << 10), "{peak} bytes for {} input bytes", input.len());
        // The same bytes in random chunks decode to the same commands and the same error (past
        // INLINE_MAX_SIZE, a chunk boundary before a newline rightly makes a too-big error).
        if input.len() <= hotkv_protocol::INLINE_MAX_SIZE {
            let split = decode(input, l, Some(&mut chunks));
            assert_eq!(whole, split, "chunking changed the outcome");
        }
        whole.error.is_none()
    });
}
