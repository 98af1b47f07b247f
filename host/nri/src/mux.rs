//! NRI's connection multiplexing: several byte streams over one Unix socket.
//!
//! Every frame on the socket is a 4-byte connection id and a 4-byte payload
//! length (both big-endian) followed by the payload. Connection 1 carries the
//! plugin's ttrpc service (the runtime calls the plugin), connection 2 the
//! runtime's (the plugin calls the runtime); id 0 is reserved. Opening a
//! connection is implicit: there is no handshake, and frames for a
//! connection nobody serves are dropped (upstream `pkg/net/multiplex`).
//!
//! A logical connection is a byte stream: frame boundaries mean nothing to
//! the ttrpc messages inside, which may span frames (the Go side writes
//! through a 4 KiB `bufio.Writer`, so a large message arrives as a 4 KiB
//! frame and one more frame of the rest).
//!
//! What we write is cut into frames of at most [`WRITE_CHUNK`] bytes: the Go
//! reader of NRI 0.6 hands each frame to a `bufio.Reader` read of at most
//! 4 KiB and fails a larger frame with ENOMEM. Seen with Debian's containerd
//! 1.7.24: an answer of 10 KB in one frame made it log "closing plugin …,
//! failed to handle CreateContainer request: ttrpc: closed"; cut into 4 KiB
//! frames it arrives whole (the containerd integration test sends such an
//! answer).

use tokio::io::{AsyncRead, AsyncReadExt};

/// Frame header length: connection id and payload length.
pub(crate) const HEADER_LEN: usize = 8;
/// The largest frame payload upstream accepts (`maxPayloadSize`).
pub(crate) const MAX_FRAME_PAYLOAD: usize = 1 << 24;
/// The largest frame we write (see the module docs).
pub(crate) const WRITE_CHUNK: usize = 4096;
/// The connection of the plugin's service (`PluginServiceConn`).
pub(crate) const PLUGIN_SERVICE_CONN: u32 = 1;
/// The connection of the runtime's service (`RuntimeServiceConn`).
pub(crate) const RUNTIME_SERVICE_CONN: u32 = 2;

/// Why no frame could be read from the runtime's socket.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("the connection ended inside a frame (read {got} of {want} bytes of its {part})")]
    Torn {
        part: &'static str,
        got: usize,
        want: usize,
    },
    #[error("a frame for connection {conn} announces {len} bytes, more than the {MAX_FRAME_PAYLOAD} a frame may carry")]
    TooLarge { conn: u32, len: usize },
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Reads the next frame into `payload` (replacing its contents) and returns
/// its connection id, or `None` when the stream ended cleanly between frames.
/// A frame longer than [`MAX_FRAME_PAYLOAD`] is refused before its payload is
/// read.
pub(crate) async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    payload: &mut Vec<u8>,
) -> Result<Option<u32>, FrameError> {
    let mut header = [0u8; HEADER_LEN];
    let got = read_full(r, &mut header).await?;
    if got == 0 {
        return Ok(None);
    }
    if got < HEADER_LEN {
        return Err(FrameError::Torn {
            part: "header",
            got,
            want: HEADER_LEN,
        });
    }
    let conn = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
    let len = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
    if len > MAX_FRAME_PAYLOAD {
        return Err(FrameError::TooLarge { conn, len });
    }
    payload.clear();
    payload.resize(len, 0);
    let got = read_full(r, payload).await?;
    if got < len {
        return Err(FrameError::Torn {
            part: "payload",
            got,
            want: len,
        });
    }
    Ok(Some(conn))
}

/// Reads until `buf` is full or the stream ends; returns the bytes read.
async fn read_full<R: AsyncRead + Unpin>(r: &mut R, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]).await? {
            0 => break,
            n => got += n,
        }
    }
    Ok(got)
}

/// Appends `data` to `out` as frames of connection `conn`, each at most
/// [`WRITE_CHUNK`] bytes of payload.
pub(crate) fn encode_frames(conn: u32, data: &[u8], out: &mut Vec<u8>) {
    for chunk in data.chunks(WRITE_CHUNK) {
        out.extend_from_slice(&conn.to_be_bytes());
        out.extend_from_slice(&(chunk.len() as u32).to_be_bytes());
        out.extend_from_slice(chunk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(conn: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = conn.to_be_bytes().to_vec();
        v.extend((payload.len() as u32).to_be_bytes());
        v.extend(payload);
        v
    }

    #[tokio::test]
    async fn reads_frames_of_both_connections_in_order() {
        let mut bytes = frame(1, b"abc");
        bytes.extend(frame(2, b""));
        bytes.extend(frame(2, b"xy"));
        let mut r = bytes.as_slice();
        let mut p = Vec::new();
        assert_eq!(read_frame(&mut r, &mut p).await.unwrap(), Some(1));
        assert_eq!(p, b"abc");
        assert_eq!(read_frame(&mut r, &mut p).await.unwrap(), Some(2));
        assert_eq!(p, b"");
        assert_eq!(read_frame(&mut r, &mut p).await.unwrap(), Some(2));
        assert_eq!(p, b"xy");
        assert_eq!(read_frame(&mut r, &mut p).await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_frame_split_across_reads_is_reassembled() {
        let bytes = frame(1, b"hello world");
        let (mut client, mut server) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            for b in bytes.chunks(3) {
                client.write_all(b).await.unwrap();
                tokio::task::yield_now().await;
            }
        });
        let mut p = Vec::new();
        assert_eq!(read_frame(&mut server, &mut p).await.unwrap(), Some(1));
        assert_eq!(p, b"hello world");
        writer.await.unwrap();
    }

    #[tokio::test]
    async fn torn_header_and_torn_payload_are_errors() {
        let bytes = frame(1, b"hello");
        let mut p = Vec::new();
        let err = read_frame(&mut &bytes[..5], &mut p).await.unwrap_err();
        assert!(
            matches!(
                err,
                FrameError::Torn {
                    part: "header",
                    got: 5,
                    want: 8
                }
            ),
            "{err:?}"
        );
        let err = read_frame(&mut &bytes[..10], &mut p).await.unwrap_err();
        assert!(
            matches!(
                err,
                FrameError::Torn {
                    part: "payload",
                    got: 2,
                    want: 5
                }
            ),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn oversized_frame_is_refused_without_reading_it() {
        let mut bytes = 2u32.to_be_bytes().to_vec();
        bytes.extend(((MAX_FRAME_PAYLOAD + 1) as u32).to_be_bytes());
        let mut p = Vec::new();
        let err = read_frame(&mut bytes.as_slice(), &mut p).await.unwrap_err();
        assert!(
            matches!(err, FrameError::TooLarge { conn: 2, len } if len == MAX_FRAME_PAYLOAD + 1),
            "{err:?}"
        );
        assert!(p.capacity() < 1024, "the refused payload was not buffered");
    }

    #[test]
    fn writes_are_cut_into_4k_frames() {
        let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let mut out = Vec::new();
        encode_frames(2, &data, &mut out);
        let mut rest = out.as_slice();
        let mut joined: Vec<u8> = Vec::new();
        let mut sizes = Vec::new();
        while !rest.is_empty() {
            let conn = u32::from_be_bytes(rest[..4].try_into().unwrap());
            let len = u32::from_be_bytes(rest[4..8].try_into().unwrap()) as usize;
            assert_eq!(conn, 2);
            sizes.push(len);
            joined.extend(&rest[8..8 + len]);
            rest = &rest[8 + len..];
        }
        assert_eq!(sizes, [4096, 4096, 1808]);
        assert_eq!(joined, data);
    }
}
