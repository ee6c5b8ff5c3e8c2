//! The front's book of open connections: how many each address holds and how many are open in
//! all, counted at accept (before the first byte), and which of them have sent nothing yet
//! (those may be evicted, oldest first, to make room).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::oneshot;

/// What the front counts (read with [`FrontStats`](super::FrontStats)).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) refused_per_address: AtomicU64,
    pub(crate) refused_global: AtomicU64,
    pub(crate) evicted_idle: AtomicU64,
    pub(crate) header_timeouts: AtomicU64,
}

struct Entry {
    addr: IpAddr,
    /// Set while the connection has sent nothing: evicting it sends on this.
    idle: Option<oneshot::Sender<()>>,
}

#[derive(Default)]
struct Inner {
    next: u64,
    live: HashMap<u64, Entry>,
    per_addr: HashMap<IpAddr, usize>,
    /// Ids of idle connections, oldest first (stale ids are skipped).
    idle_order: VecDeque<u64>,
}

/// The open connections.
pub(crate) struct Book {
    inner: Mutex<Inner>,
    per_address: usize,
    global: usize,
    pub(crate) counters: Arc<Counters>,
}

/// A connection's place in the book, released when dropped.
pub(crate) struct Slot {
    book: Arc<Book>,
    id: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.book.release(self.id);
    }
}

impl Slot {
    /// The connection sent its first bytes: it can no longer be evicted.
    pub(crate) fn busy(&self) {
        if let Some(e) = self.book.inner.lock().live.get_mut(&self.id) {
            e.idle = None;
        }
    }
}

impl Book {
    pub(crate) fn new(per_address: usize, global: usize) -> Arc<Book> {
        Arc::new(Book {
            inner: Mutex::new(Inner::default()),
            per_address: per_address.max(1),
            global: global.max(1),
            counters: Arc::default(),
        })
    }

    /// How many connections are open.
    pub(crate) fn open(&self) -> usize {
        self.inner.lock().live.len()
    }

    /// Admits a connection from `addr`: when its address (or the server) is at its cap, the
    /// oldest connection of that address (or any) that has sent nothing is closed to make
    /// room; when none can be, the new one is refused (`None`). Otherwise its slot, and what
    /// tells it it was evicted.
    pub(crate) fn admit(self: &Arc<Self>, addr: IpAddr) -> Option<(Slot, oneshot::Receiver<()>)> {
        let mut g = self.inner.lock();
        while g.per_addr.get(&addr).copied().unwrap_or(0) >= self.per_address {
            if !evict_oldest(&mut g, Some(addr)) {
                self.counters
                    .refused_per_address
                    .fetch_add(1, Ordering::Relaxed);
                return None;
            }
            self.counters.evicted_idle.fetch_add(1, Ordering::Relaxed);
        }
        while g.live.len() >= self.global {
            if !evict_oldest(&mut g, None) {
                self.counters.refused_global.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            self.counters.evicted_idle.fetch_add(1, Ordering::Relaxed);
        }
        let id = g.next;
        g.next += 1;
        let (tx, rx) = oneshot::channel();
        g.live.insert(
            id,
            Entry {
                addr,
                idle: Some(tx),
            },
        );
        g.idle_order.push_back(id);
        *g.per_addr.entry(addr).or_default() += 1;
        drop(g);
        Some((
            Slot {
                book: self.clone(),
                id,
            },
            rx,
        ))
    }

    fn release(&self, id: u64) {
        let mut g = self.inner.lock();
        if let Some(e) = g.live.remove(&id) {
            dec(&mut g.per_addr, e.addr);
        }
        // Forget ids at the front that are no longer idle connections.
        while let Some(front) = g.idle_order.front().copied() {
            if g.live.get(&front).is_some_and(|e| e.idle.is_some()) {
                break;
            }
            g.idle_order.pop_front();
        }
    }
}

fn dec(per_addr: &mut HashMap<IpAddr, usize>, addr: IpAddr) {
    if let Some(n) = per_addr.get_mut(&addr) {
        *n -= 1;
        if *n == 0 {
            per_addr.remove(&addr);
        }
    }
}

/// Closes the oldest idle connection (of `addr`, when given); it leaves the counts at once
/// (its task closes the socket when it sees the signal).
fn evict_oldest(g: &mut Inner, addr: Option<IpAddr>) -> bool {
    let found = g.idle_order.iter().position(|id| {
        g.live
            .get(id)
            .is_some_and(|e| e.idle.is_some() && addr.is_none_or(|a| a == e.addr))
    });
    let Some(pos) = found else {
        // Drop stale ids so the scan stays short.
        let live = &g.live;
        g.idle_order
            .retain(|id| live.get(id).is_some_and(|e| e.idle.is_some()));
        return false;
    };
    let Some(id) = g.idle_order.remove(pos) else {
        return false;
    };
    if let Some(e) = g.live.remove(&id) {
        dec(&mut g.per_addr, e.addr);
        if let Some(tx) = e.idle {
            let _ = tx.send(());
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_at_its_cap_evicts_its_oldest_idle_connection_or_is_refused() {
        let book = Book::new(2, 100);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let (s1, mut e1) = book.admit(a).unwrap();
        let (s2, _e2) = book.admit(a).unwrap();
        let (_s3, _e3) = book.admit(a).unwrap();
        assert!(e1.try_recv().is_ok(), "the oldest idle one was evicted");
        drop(s1);
        assert_eq!(book.open(), 2);
        s2.busy();
        // Two busy or idle-but-newer: the third evicts the idle one; with both busy, refused.
        let (s4, _e4) = book.admit(a).unwrap();
        s4.busy();
        assert!(book.admit(a).is_none());
        assert!(book.admit(b).is_some(), "another address is not affected");
    }

    #[test]
    fn the_global_cap_evicts_idle_connections_of_any_address_first() {
        let book = Book::new(10, 2);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let (s1, _) = book.admit(a).unwrap();
        s1.busy();
        let (_s2, mut e2) = book.admit(a).unwrap();
        let (s3, _) = book.admit(b).unwrap();
        assert!(e2.try_recv().is_ok());
        s3.busy();
        assert!(book.admit(b).is_none());
        assert_eq!(book.counters.refused_global.load(Ordering::Relaxed), 1);
    }
}
