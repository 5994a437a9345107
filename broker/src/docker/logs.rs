//! Container logs, bounded: the first half of the budget keeps the head, a sliding window keeps
//! the tail, and only whole lines are kept, so the decisive last line of an engine survives.
//! The Engine API multiplexes stdout and stderr in the order the daemon logged them (each stream
//! in order; across streams, the order their lines reached the daemon), so no timestamp merge of
//! two CLI outputs is needed as in the reference.

use std::collections::VecDeque;

use bollard::container::LogOutput;
use bollard::query_parameters::LogsOptionsBuilder;
use futures_util::StreamExt;
use serde::Serialize;

use super::client::{Docker, CALL_TIMEOUT};
use super::error::{DockerError, Failure, Result};

/// Default budget for one log read (both streams together).
pub const DEFAULT_LOG_BYTES: usize = 4 << 20;

/// Which stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogStream {
    Stdout,
    Stderr,
}

/// One whole line (without its newline).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogLine {
    pub stream: LogStream,
    pub text: String,
}

/// A bounded log: `head`, then (if anything was dropped) `tail`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct BoundedLogs {
    pub(crate) head: Vec<LogLine>,
    pub(crate) tail: Vec<LogLine>,
    /// Lines dropped between head and tail.
    pub(crate) dropped_lines: u64,
}

impl BoundedLogs {
    /// Every kept line in order.
    pub fn lines(&self) -> impl Iterator<Item = &LogLine> {
        self.head.iter().chain(self.tail.iter())
    }

    /// The kept text, one line each, in order.
    pub(crate) fn text(&self) -> String {
        let mut out = String::new();
        for line in self.lines() {
            out.push_str(&line.text);
            out.push('\n');
        }
        out
    }
}

/// Collects frames into a [`BoundedLogs`] within `limit` bytes.
#[derive(Debug)]
pub(crate) struct LogCollector {
    head_cap: usize,
    tail_cap: usize,
    head: Vec<LogLine>,
    head_bytes: usize,
    head_closed: bool,
    tail: VecDeque<LogLine>,
    tail_bytes: usize,
    dropped: u64,
    partial: [Vec<u8>; 2],
    /// Inside an over-long line that was already dropped: skip to its newline.
    discarding: [bool; 2],
}

impl LogCollector {
    pub(crate) fn new(limit: usize) -> LogCollector {
        let head_cap = limit.div_ceil(2);
        LogCollector {
            head_cap,
            tail_cap: limit - head_cap,
            head: Vec::new(),
            head_bytes: 0,
            head_closed: false,
            tail: VecDeque::new(),
            tail_bytes: 0,
            dropped: 0,
            partial: [Vec::new(), Vec::new()],
            discarding: [false, false],
        }
    }

    /// Adds a frame of `stream`.
    pub(crate) fn push(&mut self, stream: LogStream, bytes: &[u8]) {
        let slot = stream as usize;
        let mut rest = bytes;
        while let Some(pos) = rest.iter().position(|&b| b == b'\n') {
            let mut line = std::mem::take(&mut self.partial[slot]);
            line.extend_from_slice(&rest[..pos]);
            if !std::mem::take(&mut self.discarding[slot]) {
                self.line(stream, &line);
            }
            rest = &rest[pos + 1..];
        }
        if self.discarding[slot] {
            return;
        }
        let partial = &mut self.partial[slot];
        partial.extend_from_slice(rest);
        // A line longer than the whole budget can never be kept whole: drop it as it grows.
        if partial.len() > self.head_cap.max(self.tail_cap) {
            partial.clear();
            self.discarding[slot] = true;
            self.dropped += 1;
        }
    }

    fn line(&mut self, stream: LogStream, raw: &[u8]) {
        let text = String::from_utf8_lossy(raw)
            .trim_end_matches('\r')
            .to_owned();
        let size = text.len() + 1;
        if !self.head_closed && self.head_bytes + size <= self.head_cap {
            self.head_bytes += size;
            self.head.push(LogLine { stream, text });
            return;
        }
        self.head_closed = true;
        if size > self.tail_cap {
            self.dropped += 1;
            return;
        }
        self.tail_bytes += size;
        self.tail.push_back(LogLine { stream, text });
        while self.tail_bytes > self.tail_cap {
            if let Some(old) = self.tail.pop_front() {
                self.tail_bytes -= old.text.len() + 1;
                self.dropped += 1;
            }
        }
    }

    /// Flushes unterminated lines and returns the result.
    pub(crate) fn finish(mut self) -> BoundedLogs {
        for stream in [LogStream::Stdout, LogStream::Stderr] {
            let rest = std::mem::take(&mut self.partial[stream as usize]);
            if !rest.is_empty() {
                self.line(stream, &rest);
            }
        }
        BoundedLogs {
            head: self.head,
            tail: self.tail.into_iter().collect(),
            dropped_lines: self.dropped,
        }
    }
}

impl Docker {
    /// Reads a container's log (stdout and stderr in order), at most `limit` bytes kept;
    /// `tail` limits the read to the last lines.
    pub async fn logs(
        &self,
        container: &str,
        tail: Option<u32>,
        limit: usize,
    ) -> Result<BoundedLogs> {
        let tail_text = tail.map_or_else(|| "all".to_owned(), |n| n.max(1).to_string());
        let options = LogsOptionsBuilder::new()
            .stdout(true)
            .stderr(true)
            .follow(false)
            .timestamps(false)
            .tail(&tail_text)
            .build();
        let mut stream = self.api.logs(container, Some(options));
        let mut collector = LogCollector::new(limit);
        let read = async {
            while let Some(frame) = stream.next().await {
                match frame {
                    Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => {
                        collector.push(LogStream::Stdout, &message)
                    }
                    Ok(LogOutput::StdErr { message }) => {
                        collector.push(LogStream::Stderr, &message)
                    }
                    Ok(LogOutput::StdIn { .. }) => {}
                    Err(err) => return Err(err),
                }
            }
            Ok(())
        };
        match tokio::time::timeout(CALL_TIMEOUT, read).await {
            Err(_) => Err(DockerError::DaemonTimeout {
                what: "container logs",
                seconds: CALL_TIMEOUT.as_secs(),
            }),
            Ok(Err(err)) => {
                let failure = Failure::of(err);
                if failure.status() == Some(404) {
                    Err(DockerError::ContainerAbsent {
                        container: container.to_owned(),
                    })
                } else {
                    Err(self.fail_with("container logs", failure))
                }
            }
            Ok(Ok(())) => Ok(collector.finish()),
        }
    }

    pub(crate) fn fail_with(&self, what: &'static str, failure: Failure) -> DockerError {
        failure.into_error(
            what,
            &self.socket().display().to_string(),
            CALL_TIMEOUT.as_secs(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_the_budget_everything_is_kept_in_order() {
        let mut c = LogCollector::new(1000);
        c.push(LogStream::Stdout, b"one\ntw");
        c.push(LogStream::Stderr, b"err\n");
        c.push(LogStream::Stdout, b"o\nlast");
        let logs = c.finish();
        let lines: Vec<_> = logs.lines().map(|l| (l.stream, l.text.as_str())).collect();
        assert_eq!(
            lines,
            vec![
                (LogStream::Stdout, "one"),
                (LogStream::Stderr, "err"),
                (LogStream::Stdout, "two"),
                (LogStream::Stdout, "last")
            ]
        );
        assert_eq!(logs.dropped_lines, 0);
    }

    #[test]
    fn over_the_budget_keeps_whole_lines_from_both_ends() {
        let mut c = LogCollector::new(100);
        for i in 0..100 {
            c.push(
                if i % 2 == 0 {
                    LogStream::Stdout
                } else {
                    LogStream::Stderr
                },
                format!("line {i:03}\n").as_bytes(),
            );
        }
        c.push(LogStream::Stderr, b"CUDA out of memory\n");
        let logs = c.finish();
        assert_eq!(logs.head.first().unwrap().text, "line 000");
        assert_eq!(logs.tail.last().unwrap().text, "CUDA out of memory");
        assert!(logs.dropped_lines > 0);
        let kept: usize = logs.lines().map(|l| l.text.len() + 1).sum();
        assert!(kept <= 100, "{kept}");
        assert!(logs
            .lines()
            .all(|l| l.text.starts_with("line ") || l.text.starts_with("CUDA")));
    }

    #[test]
    fn an_endless_line_does_not_grow_memory() {
        let mut c = LogCollector::new(64);
        for _ in 0..1000 {
            c.push(LogStream::Stdout, &[b'x'; 50]);
        }
        c.push(LogStream::Stdout, b"\nok\n");
        let logs = c.finish();
        let lines: Vec<_> = logs.lines().map(|l| l.text.as_str()).collect();
        assert_eq!(lines, vec!["ok"]);
        assert_eq!(logs.dropped_lines, 1);
    }
}
