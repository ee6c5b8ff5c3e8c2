//! One shared pass over a string for the detectors whose matches lie in a long token
//! (`[A-Za-z0-9_\-+/=]`): `secret_key` (a token of at least 15 bytes) and `jwt` (its first part
//! is at least 15 base64url bytes, as `{"alg":"x"}` is 11 bytes, so it lies in such a token).
//!
//! A token of 15 bytes or more holds a whole aligned 8-byte word with no byte `<= 0x20` (a
//! space, a line break), and at least 4 more such bytes right before or right after that word.
//! So the pass reads the string a word at a time, with a few arithmetic operations per word at
//! fixed steps (no branch per byte, no step that waits on the previous one's outcome), looks at
//! the 4 bytes on each side of a word without such a byte (in prose, about 3 % of the words:
//! long words, dates), and stops only when one side has none either (links, addresses, keys).
//! There the token around the word is found and, when it has 15 bytes or more, given alone to
//! the detectors' own checks. Each token is checked once. The answers equal the detectors' own
//! scans (`first_pass_tests.rs`).

use super::scan::run_end;
use super::secrets::{MIN_JWT_HEADER, MIN_PREFIXED, jwt_at, secret_token, token_char};

/// `secret_key` in [`first_pass`]'s masks.
pub(crate) const SECRET: u8 = crate::policy::SHARED_SECRET;
/// `jwt`.
pub(crate) const JWT: u8 = crate::policy::SHARED_JWT;

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// Whether every byte of the word `c` (8 bytes) is above `0x20`: no byte is below `0x21`
/// (the classic "has a byte less than n" test, exact as a yes/no answer for n <= 128).
#[inline(always)]
fn unspaced(c: &[u8]) -> bool {
    let mut w = [0u8; 8];
    w.copy_from_slice(c);
    let x = u64::from_le_bytes(w);
    x.wrapping_sub(LO * 0x21) & !x & HI == 0
}

/// Whether every byte of the half word `c` (4 bytes) is above `0x20`.
#[inline(always)]
fn unspaced_half(c: &[u8]) -> bool {
    let mut w = [0u8; 4];
    w.copy_from_slice(c);
    let x = u32::from_le_bytes(w);
    x.wrapping_sub(0x2121_2121) & !x & 0x8080_8080 == 0
}

/// Whether the unspaced word at `w` may be in a token of 15 bytes or more: such a token runs at
/// least 7 bytes past the word's ends together, so at least 4 on one side, where the 4 bytes
/// next to the word are then unspaced too.
#[inline(always)]
fn may_be_long(s: &[u8], w: usize) -> bool {
    (w >= 4 && unspaced_half(&s[w - 4..w]))
        || (w + 12 <= s.len() && unspaced_half(&s[w + 8..w + 12]))
}

/// The first whole word at or after `k` (a multiple of 8) with no byte `<= 0x20` that may be in
/// a long token: the loop the pass spends its time in, four words per step.
#[inline(never)]
fn next_word(s: &[u8], k: usize) -> Option<usize> {
    let rest = &s[k..];
    let mut quads = rest.chunks_exact(32);
    for (j, c) in quads.by_ref().enumerate() {
        let u = [
            unspaced(&c[..8]),
            unspaced(&c[8..16]),
            unspaced(&c[16..24]),
            unspaced(&c[24..]),
        ];
        if u[0] | u[1] | u[2] | u[3] {
            let base = k + 32 * j;
            if let Some(i) = (0..4).find(|&i| u[i] && may_be_long(s, base + 8 * i)) {
                return Some(base + 8 * i);
            }
        }
    }
    let tail = quads.remainder();
    let base = k + rest.len() - tail.len();
    tail.chunks_exact(8)
        .enumerate()
        .find(|&(j, c)| unspaced(c) && may_be_long(s, base + 8 * j))
        .map(|(j, _)| base + 8 * j)
}

/// Which of the detectors in `want` (a mask of [`SECRET`] and [`JWT`]) match in `s`: the same
/// answers as their own scans.
pub(crate) fn first_pass(s: &[u8], want: u8) -> u8 {
    let mut found = 0;
    // Tokens ending before this have been checked.
    let mut done = 0;
    let mut k = 0;
    while let Some(at) = next_word(s, k) {
        k = at + 8;
        if at < done || !s[at..at + 8].iter().all(|&b| token_char(b)) {
            continue;
        }
        let mut start = at;
        while start > 0 && token_char(s[start - 1]) {
            start -= 1;
        }
        let end = run_end(s, at + 8, token_char);
        done = end;
        if end - start < MIN_PREFIXED.min(MIN_JWT_HEADER) {
            continue;
        }
        found |= check(s, start, end, want & !found);
        if found == want {
            break;
        }
    }
    found
}

/// The detectors of `todo` that match in the token `s[start..end]`.
fn check(s: &[u8], start: usize, end: usize, todo: u8) -> u8 {
    let mut found = 0;
    if todo & SECRET != 0 && secret_token(&s[start..end]) {
        found |= SECRET;
    }
    // A JWT's first part starts where the token does or after a `+`, `/` or `=` in it.
    if todo & JWT != 0
        && (start..end - 1).any(|j| {
            s[j] == b'e' && (j == start || matches!(s[j - 1], b'+' | b'/' | b'=')) && jwt_at(s, j)
        })
    {
        found |= JWT;
    }
    found
}
