//! Output capture with a fixed memory bound: the first `head` bytes and the last `tail` bytes.

use std::collections::VecDeque;

/// Default bytes kept from the start of a stream.
pub(crate) const DEFAULT_HEAD: usize = 4 * 1024;
/// Default bytes kept from the end of a stream.
pub(crate) const DEFAULT_TAIL: usize = 12 * 1024;

/// The head and tail of a byte stream, and how much was dropped between them.
#[derive(Debug, Clone)]
pub(crate) struct BoundedLog {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    total: u64,
}

impl BoundedLog {
    pub(crate) fn new(head_cap: usize, tail_cap: usize) -> BoundedLog {
        BoundedLog {
            head: Vec::new(),
            tail: VecDeque::new(),
            head_cap,
            tail_cap,
            total: 0,
        }
    }

    pub(crate) fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.head_cap.saturating_sub(self.head.len());
        let take = room.min(bytes.len());
        self.head.extend_from_slice(&bytes[..take]);
        bytes = &bytes[take..];
        if bytes.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_cap..]);
            return;
        }
        let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.tail_cap);
        self.tail.drain(..overflow);
        self.tail.extend(bytes);
    }

    /// Bytes seen but not kept.
    pub(crate) fn dropped(&self) -> u64 {
        self.total - (self.head.len() + self.tail.len()) as u64
    }

    /// The kept text (invalid UTF-8 replaced), with a marker where bytes were dropped.
    pub(crate) fn text(&self) -> String {
        let mut out = String::from_utf8_lossy(&self.head).into_owned();
        if self.dropped() > 0 {
            out.push_str(&format!("\n[… {} bytes omitted …]\n", self.dropped()));
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        out.push_str(&String::from_utf8_lossy(&tail));
        out
    }

    /// Only the end of the kept text (what a reader of the tail wants).
    pub(crate) fn tail_text(&self) -> String {
        let mut all: Vec<u8> = self.head.clone();
        if self.dropped() > 0 {
            all.clear();
        }
        all.extend(self.tail.iter());
        String::from_utf8_lossy(&all).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_everything_when_small() {
        let mut log = BoundedLog::new(4, 4);
        log.push(b"abcdefg");
        assert_eq!(log.text(), "abcdefg");
        assert_eq!(log.dropped(), 0);
    }

    #[test]
    fn keeps_head_and_tail_and_counts_the_rest() {
        let mut log = BoundedLog::new(3, 4);
        for chunk in [&b"012"[..], b"3456", b"789", b"abcdef"] {
            log.push(chunk);
        }
        assert_eq!(log.total, 16);
        assert_eq!(log.dropped(), 9);
        assert_eq!(log.text(), "012\n[… 9 bytes omitted …]\ncdef");
        assert_eq!(log.tail_text(), "cdef");
    }
}
