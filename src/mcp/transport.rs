//! Moving JSON-RPC frames between byte streams and channels, with rmcp's stdio framing
//! (`JsonRpcMessageCodec`: one JSON message per line) over raw [`Frame`]s (each keeps the text
//! it came in).

use std::process::Stdio;

use futures::SinkExt;
use rmcp::transport::async_rw::{JsonRpcMessageCodec, JsonRpcMessageCodecError};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::process::{Child, Command};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::task::JoinHandle;
use tokio_util::bytes::BytesMut;
use tokio_util::codec::{Decoder, FramedWrite};

use super::frame::Frame;

/// The largest message accepted on a line (rmcp's default for stdio).
const MAX_LINE: usize = rmcp::transport::async_rw::DEFAULT_MAX_LINE_LENGTH;

/// Reads frames from `r` into `tx` until end of input (or until `tx` is closed). A line that
/// is not JSON is logged and skipped; the stream goes on.
pub(crate) fn spawn_reader<R>(
    mut r: R,
    tx: UnboundedSender<Frame>,
    side: &'static str,
) -> JoinHandle<()>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut codec = JsonRpcMessageCodec::<Frame>::new_with_max_length(MAX_LINE);
        let mut buf = BytesMut::with_capacity(16 * 1024);
        loop {
            loop {
                match codec.decode(&mut buf) {
                    Ok(Some(v)) => {
                        if tx.send(v).is_err() {
                            return;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => skip(side, e),
                }
            }
            match r.read_buf(&mut buf).await {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!("{side}: read failed: {e}");
                    break;
                }
            }
        }
        loop {
            match codec.decode_eof(&mut buf) {
                Ok(Some(v)) => {
                    let _ = tx.send(v);
                }
                Ok(None) => break,
                Err(e) => skip(side, e),
            }
            if buf.is_empty() {
                break;
            }
        }
    })
}

fn skip(side: &str, e: JsonRpcMessageCodecError) {
    tracing::warn!("{side}: skipped a message that is not JSON-RPC: {e}");
}

/// Writes the frames of `rx` to `w`, one per line, flushing when the queue is empty. Ends when
/// every sender is gone (then the stream is closed) or when writing fails.
pub(crate) fn spawn_writer<W>(
    w: W,
    mut rx: UnboundedReceiver<Frame>,
    side: &'static str,
) -> JoinHandle<()>
where
    W: AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut sink = FramedWrite::new(w, JsonRpcMessageCodec::<Frame>::default());
        while let Some(v) = rx.recv().await {
            let mut batch = Some(v);
            while let Some(v) = batch.take() {
                if let Err(e) = sink.feed(v).await {
                    tracing::warn!("{side}: write failed: {e}");
                    return;
                }
                batch = rx.try_recv().ok();
            }
            if let Err(e) = sink.flush().await {
                tracing::warn!("{side}: write failed: {e}");
                return;
            }
        }
        let _ = sink.close().await;
    })
}

/// A connection to the upstream server: frames to it, frames from it.
pub(crate) struct Link {
    /// Frames to send upstream.
    pub(crate) tx: UnboundedSender<Frame>,
    /// Frames from upstream; closed when the server is gone.
    pub(crate) rx: UnboundedReceiver<Frame>,
    /// The child process, for a stdio upstream.
    pub(crate) child: Option<Child>,
    /// The writer task (ends once `tx` and its clones are dropped).
    pub(crate) writer: Option<JoinHandle<()>>,
}

/// Starts `program args...` with piped stdin/stdout (stderr goes to ours).
pub(crate) fn spawn_child(program: &str, args: &[String]) -> std::io::Result<Link> {
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
    let (up_tx, up_rx) = unbounded_channel();
    let (down_tx, down_rx) = unbounded_channel();
    spawn_reader(stdout, down_tx, "upstream");
    let writer = spawn_writer(stdin, up_rx, "upstream");
    Ok(Link {
        tx: up_tx,
        rx: down_rx,
        child: Some(child),
        writer: Some(writer),
    })
}
