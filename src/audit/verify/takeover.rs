//! Runs taken over across processes (design §16): a `run.resumed` event continues a run whose
//! holder died (or froze) past its lease, linking to the last chain head the store held. The
//! replaced holder may have sealed events after that head (between its last renewal and its
//! death): they hang off the same head as a second branch, the replaced holder's *tail*. A
//! `run.resumed` with `headLost: true` restarts a chain whose head Redis lost (seq 0, no
//! `prevHash`): the events before it cannot be linked to it.
//!
//! When a run has `run.resumed` events, its events are split by their hash links into the
//! main chain (through every takeover), the replaced holders' tails (one per takeover, each
//! checked as a chain continuing from the head it hangs off) and the chains restarted after a
//! lost head; each is checked as a chain of its own. A takeover is reported as information, a
//! restart after a lost head as a warning (`toolgate verify --strict` fails on warnings). A
//! run without `run.resumed` is checked exactly as before.

use std::collections::HashMap;

use super::run::{Entry, Loc, RunKey};

/// A part of a run's events, checked as a chain of its own.
pub(super) struct Part {
    /// The events, in chain order.
    pub entries: Vec<Entry>,
    /// The `seq` and hash the part continues from (a tail), or `None` (from seq 0).
    pub after: Option<(u64, String)>,
}

/// What the split found: where, the event's `seq`, whether it is a warning, the message.
pub(super) type PartNote = (Loc, u64, bool, String);

/// Splits a run's events (sorted by `seq`) at its takeovers; `Err` (the events back) when it
/// has none. Events reached by no link stay in the main part, where the usual checks report
/// them.
pub(super) fn split(
    run: &RunKey,
    entries: Vec<Entry>,
) -> Result<(Vec<Part>, Vec<PartNote>), Vec<Entry>> {
    if !entries.iter().any(|e| e.resumed.is_some()) {
        return Err(entries);
    }
    let restart = |e: &Entry| e.prev_hash.is_none() && e.resumed == Some(true);
    let Some(root) = entries
        .iter()
        .position(|e| e.prev_hash.is_none() && !restart(e))
        .or_else(|| entries.iter().position(restart))
    else {
        return Err(entries);
    };
    let mut children: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, e) in entries.iter().enumerate() {
        if let Some(p) = &e.prev_hash {
            children.entry(p.as_str()).or_default().push(i);
        }
    }
    let mut taken = vec![false; entries.len()];
    // (event indexes, index of the event a tail hangs off)
    let mut paths: Vec<(Vec<usize>, Option<usize>)> = Vec::new();
    let mut notes: Vec<PartNote> = Vec::new();
    let mut starts = vec![root];
    starts.extend((0..entries.len()).filter(|&i| i != root && restart(&entries[i])));
    for &start in &starts {
        if restart(&entries[start]) {
            notes.push((
                entries[start].loc,
                entries[start].seq,
                true,
                format!(
                    "run {} restarts its chain here: its chain head was lost with the state \
                     store's state (run.resumed, headLost); the events before cannot be linked \
                     to it",
                    run.1
                ),
            ));
        }
        let mut path = vec![start];
        taken[start] = true;
        let mut cur = start;
        loop {
            let next: Vec<usize> = children
                .get(entries[cur].hash.as_str())
                .map(|k| {
                    k.iter()
                        .copied()
                        .filter(|&i| !taken[i] && entries[i].seq == entries[cur].seq + 1)
                        .collect()
                })
                .unwrap_or_default();
            let step = match next.as_slice() {
                [one] => *one,
                [a, b] => {
                    let (resume, tail) = match (entries[*a].resumed, entries[*b].resumed) {
                        (Some(false), None) => (*a, *b),
                        (None, Some(false)) => (*b, *a),
                        _ => break,
                    };
                    let tail_path = walk(&entries, &children, &mut taken, tail);
                    notes.push((
                        entries[resume].loc,
                        entries[resume].seq,
                        false,
                        format!(
                            "run {} was taken over here from holder {} (its lease lapsed); {} \
                             event(s) that holder wrote after the last head it stored are kept \
                             as its tail",
                            run.1,
                            entries[resume].replaced.as_deref().unwrap_or("?"),
                            tail_path.len()
                        ),
                    ));
                    paths.push((tail_path, Some(cur)));
                    resume
                }
                _ => break,
            };
            if next.len() == 1 && entries[step].resumed == Some(false) {
                notes.push((
                    entries[step].loc,
                    entries[step].seq,
                    false,
                    format!(
                        "run {} was taken over here from holder {} (its lease lapsed)",
                        run.1,
                        entries[step].replaced.as_deref().unwrap_or("?")
                    ),
                ));
            }
            taken[step] = true;
            path.push(step);
            cur = step;
        }
        paths.push((path, None));
    }
    let leftover: Vec<usize> = (0..entries.len()).filter(|&i| !taken[i]).collect();
    let afters: Vec<Option<(u64, String)>> = paths
        .iter()
        .map(|(_, after)| after.map(|p| (entries[p].seq, entries[p].hash.clone())))
        .collect();
    let mut slots: Vec<Option<Entry>> = entries.into_iter().map(Some).collect();
    let mut parts = Vec::with_capacity(paths.len());
    for ((mut idx, _), after) in paths.into_iter().zip(afters) {
        if after.is_none() && idx.first() == Some(&root) {
            idx.extend(leftover.iter().copied());
            idx.sort_by_key(|&i| (slots[i].as_ref().map_or(0, |e| e.seq), i));
        }
        let entries = idx.into_iter().filter_map(|i| slots[i].take()).collect();
        parts.push(Part { entries, after });
    }
    Ok((parts, notes))
}

/// Follows single links from `start` (a replaced holder's tail).
fn walk(
    entries: &[Entry],
    children: &HashMap<&str, Vec<usize>>,
    taken: &mut [bool],
    start: usize,
) -> Vec<usize> {
    let mut path = vec![start];
    taken[start] = true;
    let mut cur = start;
    while let Some([one]) = children.get(entries[cur].hash.as_str()).map(Vec::as_slice) {
        if taken[*one] || entries[*one].seq != entries[cur].seq + 1 {
            break;
        }
        taken[*one] = true;
        path.push(*one);
        cur = *one;
    }
    path
}
