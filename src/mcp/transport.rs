//! Moving JSON-RPC frames between byte streams and the gateway, one JSON message per line (the
//! stdio framing of MCP), over queues bounded in bytes: a peer that does not read stops the
//! gateway from reading the other side (backpressure), it never grows the gateway's memory.
//!
//! A line longer than the message limit is not kept: its top-level `id` is picked out as it
//! streams past, so the request it answers can be failed ([`Incoming::TooLarge`]).

use std::process::Stdio;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

use super::frame::Frame;

/// Bytes a queue between a peer and the gateway may hold (a larger message passes alone).
pub(crate) const QUEUE_BYTES: usize = 8 << 20;

/// What a reader got from its peer.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// A message.
    Frame(Frame),
    /// A line that is not JSON.
    NotJson,
    /// A line over the limit; the text of its top-level `id`, if one was seen.
    TooLarge { id: Option<String> },
}

impl Incoming {
    fn weight(&self) -> usize {
        match self {
            Incoming::Frame(f) => f.weight(),
            _ => 64,
        }
    }
}

/// An item in a queue, holding its share of the queue's bytes until it is dropped.
#[derive(Debug)]
pub(crate) struct Item<T> {
    pub(crate) value: T,
    _permit: Option<OwnedSemaphorePermit>,
}

/// The sending end of a queue bounded in bytes.
#[derive(Debug)]
pub(crate) struct Sender<T> {
    tx: UnboundedSender<Item<T>>,
    room: Arc<Semaphore>,
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        Sender {
            tx: self.tx.clone(),
            room: self.room.clone(),
        }
    }
}

/// The receiving end.
pub(crate) type Receiver<T> = UnboundedReceiver<Item<T>>;

/// A queue holding at most [`QUEUE_BYTES`] (plus one larger item).
pub(crate) fn queue<T>() -> (Sender<T>, Receiver<T>) {
    let (tx, rx) = unbounded_channel();
    let room = Arc::new(Semaphore::new(QUEUE_BYTES));
    (Sender { tx, room }, rx)
}

/// Room for `bytes` in a queue, reserved ahead of sending.
pub(crate) struct Room(Option<OwnedSemaphorePermit>);

impl<T> Sender<T> {
    /// Waits for room for `bytes` (a larger item waits for the whole queue).
    pub(crate) async fn reserve(&self, bytes: usize) -> Room {
        let n = bytes.clamp(1, QUEUE_BYTES);
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        Room(self.room.clone().acquire_many_owned(n).await.ok())
    }

    /// Sends into reserved room; false when the receiver is gone.
    pub(crate) fn send_in(&self, room: Room, value: T) -> bool {
        self.tx
            .send(Item {
                value,
                _permit: room.0,
            })
            .is_ok()
    }
}

impl Sender<Frame> {
    /// Sends a frame once there is room for it; false when the receiver is gone.
    pub(crate) async fn send(&self, f: Frame) -> bool {
        let room = self.reserve(f.weight()).await;
        self.send_in(room, f)
    }
}

impl Sender<Incoming> {
    async fn send(&self, i: Incoming) -> bool {
        let room = self.reserve(i.weight()).await;
        self.send_in(room, i)
    }
}

/// Picks the top-level `id` out of a JSON object as it streams past, keeping O(1) state.
#[derive(Debug, Default)]
pub(crate) struct IdScan {
    depth: u32,
    in_str: bool,
    esc: bool,
    /// At depth 1, the next string is a key.
    want_key: bool,
    key: Vec<u8>,
    key_is_id: bool,
    /// Capturing the value of `id`.
    capturing: bool,
    value: Vec<u8>,
    found: Option<String>,
}

const ID_MAX: usize = 1024;

impl IdScan {
    /// Feeds the next bytes.
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if self.found.is_some() {
                return;
            }
            if self.capturing && self.value.len() < ID_MAX {
                self.value.push(b);
            }
            if self.in_str {
                if self.esc {
                    self.esc = false;
                } else if b == b'\\' {
                    self.esc = true;
                } else if b == b'"' {
                    self.in_str = false;
                    if self.depth == 1 && self.want_key {
                        self.want_key = false;
                        self.key_is_id = self.key == b"\"id";
                    }
                } else if self.depth == 1 && self.want_key && self.key.len() < 8 {
                    self.key.push(b);
                }
                continue;
            }
            match b {
                b'"' => {
                    self.in_str = true;
                    if self.depth == 1 && self.want_key {
                        self.key.clear();
                        self.key.push(b'"');
                    }
                }
                b'{' | b'[' => {
                    self.depth += 1;
                    if self.depth == 1 {
                        self.want_key = true;
                    }
                }
                b'}' | b']' | b',' => {
                    if self.depth == 1 && self.capturing {
                        self.value.pop();
                        let v = String::from_utf8_lossy(&self.value).trim().to_string();
                        self.found = Some(v);
                        return;
                    }
                    if b == b',' {
                        if self.depth == 1 {
                            self.want_key = true;
                        }
                    } else {
                        self.depth = self.depth.saturating_sub(1);
                    }
                }
                b':' if self.depth == 1 && self.key_is_id && !self.capturing => {
                    self.capturing = true;
                    self.value.clear();
                }
                _ => {}
            }
        }
    }

    /// The id's text, if one was seen.
    pub(crate) fn id(self) -> Option<String> {
        self.found.filter(|v| !v.is_empty())
    }
}

/// Reads lines from `r` into `tx` until end of input (or until `tx` is closed). A line over
/// `max` bytes is skipped as it streams ([`Incoming::TooLarge`]); reading stops while `tx` has
/// no room.
pub(crate) fn spawn_reader<R>(
    mut r: R,
    tx: Sender<Incoming>,
    max: usize,
    side: &'static str,
) -> JoinHandle<()>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
        // Bytes of `buf` known to hold no newline.
        let mut searched = 0;
        // Skipping an over-long line.
        let mut skipping: Option<IdScan> = None;
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let n = match r.read(&mut chunk).await {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!("{side}: read failed: {e}");
                    break;
                }
            };
            let mut data = &chunk[..n];
            while !data.is_empty() {
                if let Some(scan) = skipping.as_mut() {
                    match memchr::memchr(b'\n', data) {
                        Some(i) => {
                            scan.feed(&data[..i]);
                            data = &data[i + 1..];
                            let id = skipping.take().and_then(IdScan::id);
                            tracing::warn!("{side}: a message over {max} bytes was dropped");
                            if !tx.send(Incoming::TooLarge { id }).await {
                                return;
                            }
                        }
                        None => {
                            scan.feed(data);
                            data = &[];
                        }
                    }
                    continue;
                }
                buf.extend_from_slice(data);
                data = &[];
                while let Some(i) = memchr::memchr(b'\n', &buf[searched..]) {
                    let end = searched + i;
                    let line = &buf[..end];
                    if line.len() > max {
                        let mut scan = IdScan::default();
                        scan.feed(line);
                        let id = scan.id();
                        if !tx.send(Incoming::TooLarge { id }).await {
                            return;
                        }
                    } else if let Some(inc) = parse_line(line, side)
                        && !tx.send(inc).await
                    {
                        return;
                    }
                    buf.drain(..=end);
                    searched = 0;
                }
                searched = buf.len();
                if buf.len() > max {
                    let mut scan = IdScan::default();
                    scan.feed(&buf);
                    buf = Vec::with_capacity(16 * 1024);
                    searched = 0;
                    skipping = Some(scan);
                }
            }
        }
        if skipping.is_none()
            && !buf.is_empty()
            && buf.len() <= max
            && let Some(inc) = parse_line(&buf, side)
        {
            let _ = tx.send(inc).await;
        }
    })
}

/// One line: a frame, nothing (blank), or not JSON.
fn parse_line(line: &[u8], side: &str) -> Option<Incoming> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    match std::str::from_utf8(line)
        .map_err(|e| e.to_string())
        .and_then(|t| Frame::parse(t).map_err(|e| e.to_string()))
    {
        Ok(f) => Some(Incoming::Frame(f)),
        Err(e) => {
            tracing::warn!("{side}: a line that is not JSON: {e}");
            Some(Incoming::NotJson)
        }
    }
}

/// Writes the frames of `rx` to `w`, one per line, flushing when the queue is empty. Ends when
/// every sender is gone (then the stream is closed) or when writing fails.
pub(crate) fn spawn_writer<W>(
    mut w: W,
    mut rx: Receiver<Frame>,
    side: &'static str,
) -> JoinHandle<()>
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut out: Vec<u8> = Vec::with_capacity(16 * 1024);
        while let Some(item) = rx.recv().await {
            let mut next = Some(item);
            while let Some(item) = next.take() {
                item.value.write_to(&mut out);
                out.push(b'\n');
                drop(item);
                if out.len() >= 64 * 1024 {
                    if let Err(e) = w.write_all(&out).await {
                        tracing::warn!("{side}: write failed: {e}");
                        return;
                    }
                    out.clear();
                }
                next = rx.try_recv().ok();
            }
            if let Err(e) = async {
                w.write_all(&out).await?;
                w.flush().await
            }
            .await
            {
                tracing::warn!("{side}: write failed: {e}");
                return;
            }
            out.clear();
            if out.capacity() > 1 << 20 {
                out = Vec::with_capacity(16 * 1024);
            }
        }
        let _ = w.shutdown().await;
    })
}

/// A connection to the upstream server: frames to it, what comes from it.
pub(crate) struct Link {
    /// Frames to send upstream.
    pub(crate) tx: Sender<Frame>,
    /// What comes from upstream; closed when the server is gone.
    pub(crate) rx: Receiver<Incoming>,
    /// The child process, for a stdio upstream.
    pub(crate) child: Option<Child>,
    /// The writer task (ends once `tx` and its clones are dropped).
    pub(crate) writer: Option<JoinHandle<()>>,
}

/// Starts `program args...` with piped stdin/stdout (stderr goes to ours).
pub(crate) fn spawn_child(program: &str, args: &[String], max: usize) -> std::io::Result<Link> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let (stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
        (Some(i), Some(o)) => (i, o),
        _ => return Err(std::io::Error::other("the child's pipes are missing")),
    };
    let (up_tx, up_rx) = queue();
    let (down_tx, down_rx) = queue();
    spawn_reader(stdout, down_tx, max, "upstream");
    let writer = spawn_writer(stdin, up_rx, "upstream");
    Ok(Link {
        tx: up_tx,
        rx: down_rx,
        child: Some(child),
        writer: Some(writer),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id_of(text: &str) -> Option<String> {
        let mut s = IdScan::default();
        for chunk in text.as_bytes().chunks(3) {
            s.feed(chunk);
        }
        s.id()
    }

    #[test]
    fn ids_are_picked_out_of_streams() {
        assert_eq!(
            id_of(r#"{"jsonrpc":"2.0","id":12,"result":{}}"#).as_deref(),
            Some("12")
        );
        assert_eq!(
            id_of(r#"{"result":{"id":5,"x":"\"id\":3"},"jsonrpc":"2.0","id" : "a,}b"}"#).as_deref(),
            Some(r#""a,}b""#)
        );
        assert_eq!(
            id_of(r#"{"result":{"content":[1,2]},"id":7}"#).as_deref(),
            Some("7")
        );
        assert_eq!(id_of(r#"{"result":{"content":"xxxx"#), None);
        assert_eq!(id_of(r#"{"idx":1,"id":2.0}"#).as_deref(), Some("2.0"));
    }
}
