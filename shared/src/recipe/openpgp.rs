//! Just enough OpenPGP (RFC 4880) to pin a repository key: ASCII armor with its CRC-24, the packet
//! framing, and the v4 fingerprint of every primary public key. No signature checks: apt and dnf
//! verify repository signatures; this module only decides whether key bytes are the pinned key.

use base64::Engine as _;
use sha1::{Digest as _, Sha1};

/// The largest key block a recipe may carry (the vendors' keys are 2–7 KiB).
pub const MAX_KEY_BYTES: usize = 256 * 1024;

const ARMOR_BEGIN: &str = "-----BEGIN PGP PUBLIC KEY BLOCK-----";
const ARMOR_END: &str = "-----END PGP PUBLIC KEY BLOCK-----";
const TAG_PUBLIC_KEY: u8 = 6;

/// Why key bytes are not a usable public key block.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the key is not armored (no PGP PUBLIC KEY BLOCK)")]
    NotArmored,
    #[error("the key's armor is malformed: {0}")]
    BadArmor(&'static str),
    #[error("the key's armor checksum does not match its contents")]
    BadChecksum,
    #[error("the key is larger than {MAX_KEY_BYTES} bytes")]
    TooLarge,
    #[error("the key's packets are malformed: {0}")]
    BadPackets(&'static str),
    #[error("the key block holds no primary public key")]
    NoPrimaryKey,
    #[error("the key block holds a version {0} primary key; only version 4 is accepted")]
    UnsupportedVersion(u8),
}

/// A v4 fingerprint: 40 uppercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// Parses 40 hex digits (either case, no spaces) into the uppercase form.
    pub fn parse(text: &str) -> Option<Fingerprint> {
        (text.len() == 40 && text.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| Fingerprint(text.to_ascii_uppercase()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// CRC-24 of RFC 4880 §6.1.
pub fn crc24(data: &[u8]) -> u32 {
    let mut crc: u32 = 0x00B7_04CE;
    for &byte in data {
        crc ^= u32::from(byte) << 16;
        for _ in 0..8 {
            crc <<= 1;
            if crc & 0x0100_0000 != 0 {
                crc ^= 0x0186_4CFB;
            }
        }
    }
    crc & 0x00FF_FFFF
}

/// Decodes an ASCII-armored public key block, checking the CRC-24 when present.
pub fn dearmor(text: &str) -> Result<Vec<u8>, KeyError> {
    if text.len() > MAX_KEY_BYTES * 2 {
        return Err(KeyError::TooLarge);
    }
    let mut lines = text.lines().map(|l| l.trim_end_matches('\r'));
    if !lines.by_ref().any(|l| l.trim_end() == ARMOR_BEGIN) {
        return Err(KeyError::NotArmored);
    }
    // Armor headers ("Version: …", "Comment: …") end at the first blank line.
    let mut in_headers = true;
    let mut body = String::new();
    let mut checksum: Option<&str> = None;
    let mut ended = false;
    for line in lines {
        let line = line.trim_end();
        if line == ARMOR_END {
            ended = true;
            break;
        }
        if in_headers {
            if line.is_empty() {
                in_headers = false;
                continue;
            }
            if line.contains(": ") {
                continue;
            }
            // Some copies omit the blank line: the first data line ends the headers.
            in_headers = false;
        }
        if let Some(sum) = line.strip_prefix('=') {
            checksum = Some(sum);
            continue;
        }
        if checksum.is_some() {
            return Err(KeyError::BadArmor("data after the checksum line"));
        }
        body.push_str(line);
    }
    if !ended {
        return Err(KeyError::BadArmor("no END line"));
    }
    let engine = base64::engine::general_purpose::STANDARD;
    let bytes = engine
        .decode(body.as_bytes())
        .map_err(|_| KeyError::BadArmor("the body is not base64"))?;
    if bytes.is_empty() {
        return Err(KeyError::BadArmor("the body is empty"));
    }
    if bytes.len() > MAX_KEY_BYTES {
        return Err(KeyError::TooLarge);
    }
    if let Some(sum) = checksum {
        let raw = engine
            .decode(sum.as_bytes())
            .map_err(|_| KeyError::BadArmor("the checksum is not base64"))?;
        let expected = match raw.as_slice() {
            [a, b, c] => (u32::from(*a) << 16) | (u32::from(*b) << 8) | u32::from(*c),
            _ => return Err(KeyError::BadArmor("the checksum is not 3 bytes")),
        };
        if crc24(&bytes) != expected {
            return Err(KeyError::BadChecksum);
        }
    }
    Ok(bytes)
}

/// One packet: its tag and body.
struct Packet<'a> {
    tag: u8,
    body: &'a [u8],
}

fn packets(mut data: &[u8]) -> Result<Vec<Packet<'_>>, KeyError> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let first = data[0];
        if first & 0x80 == 0 {
            return Err(KeyError::BadPackets("a packet header without its high bit"));
        }
        let (tag, header_len, body_len): (u8, usize, usize) = if first & 0x40 != 0 {
            // New format.
            let tag = first & 0x3F;
            let l0 = *data
                .get(1)
                .ok_or(KeyError::BadPackets("truncated header"))? as usize;
            match l0 {
                0..=191 => (tag, 2, l0),
                192..=223 => {
                    let l1 = *data
                        .get(2)
                        .ok_or(KeyError::BadPackets("truncated header"))?
                        as usize;
                    (tag, 3, ((l0 - 192) << 8) + l1 + 192)
                }
                255 => {
                    let b = data
                        .get(2..6)
                        .ok_or(KeyError::BadPackets("truncated header"))?;
                    let len = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
                    (tag, 6, len)
                }
                _ => return Err(KeyError::BadPackets("partial body lengths in a key block")),
            }
        } else {
            // Old format.
            let tag = (first >> 2) & 0x0F;
            match first & 0x03 {
                0 => {
                    let l = *data
                        .get(1)
                        .ok_or(KeyError::BadPackets("truncated header"))?
                        as usize;
                    (tag, 2, l)
                }
                1 => {
                    let b = data
                        .get(1..3)
                        .ok_or(KeyError::BadPackets("truncated header"))?;
                    (tag, 3, u16::from_be_bytes([b[0], b[1]]) as usize)
                }
                2 => {
                    let b = data
                        .get(1..5)
                        .ok_or(KeyError::BadPackets("truncated header"))?;
                    (
                        tag,
                        5,
                        u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize,
                    )
                }
                _ => return Err(KeyError::BadPackets("indeterminate length in a key block")),
            }
        };
        let end = header_len
            .checked_add(body_len)
            .ok_or(KeyError::BadPackets("length overflow"))?;
        let body = data
            .get(header_len..end)
            .ok_or(KeyError::BadPackets("a packet runs past the end"))?;
        out.push(Packet { tag, body });
        data = &data[end..];
    }
    Ok(out)
}

/// The v4 fingerprints of every primary public key in a binary key block, in order.
pub fn primary_fingerprints(binary: &[u8]) -> Result<Vec<Fingerprint>, KeyError> {
    if binary.len() > MAX_KEY_BYTES {
        return Err(KeyError::TooLarge);
    }
    let mut out = Vec::new();
    for packet in packets(binary)? {
        if packet.tag != TAG_PUBLIC_KEY {
            continue;
        }
        let version = *packet
            .body
            .first()
            .ok_or(KeyError::BadPackets("empty key packet"))?;
        if version != 4 {
            return Err(KeyError::UnsupportedVersion(version));
        }
        let len = u16::try_from(packet.body.len())
            .map_err(|_| KeyError::BadPackets("a key packet over 64 KiB"))?;
        let mut hasher = Sha1::new();
        hasher.update([0x99]);
        hasher.update(len.to_be_bytes());
        hasher.update(packet.body);
        out.push(Fingerprint(hex::encode_upper(hasher.finalize())));
    }
    if out.is_empty() {
        return Err(KeyError::NoPrimaryKey);
    }
    Ok(out)
}

/// Key bytes as found on disk or in a recipe: armored text or a binary key block.
pub fn fingerprints_of_file(bytes: &[u8]) -> Result<Vec<Fingerprint>, KeyError> {
    if bytes.len() > MAX_KEY_BYTES * 2 {
        return Err(KeyError::TooLarge);
    }
    match bytes.first() {
        Some(b) if b & 0x80 != 0 => primary_fingerprints(bytes),
        _ => {
            let text = std::str::from_utf8(bytes).map_err(|_| KeyError::NotArmored)?;
            primary_fingerprints(&dearmor(text)?)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc24_of_nothing_is_the_initial_value() {
        assert_eq!(crc24(&[]), 0x00B7_04CE);
        assert_ne!(crc24(b"cashp"), crc24(b"cashq"));
    }

    #[test]
    fn fingerprint_parse_normalises_case_and_refuses_other_lengths() {
        let fp = Fingerprint::parse("9dc858229fc7dd38854ae2d88d81803c0ebfcd88").unwrap();
        assert_eq!(fp.as_str(), "9DC858229FC7DD38854AE2D88D81803C0EBFCD88");
        assert!(Fingerprint::parse("9DC8 5822").is_none());
        assert!(Fingerprint::parse(&"G".repeat(40)).is_none());
    }

    #[test]
    fn html_is_not_armored() {
        assert_eq!(
            dearmor("<html><body>Not Found</body></html>"),
            Err(KeyError::NotArmored)
        );
    }

    #[test]
    fn malformed_packets_are_refused() {
        for data in [
            &[0x00u8, 0x01][..],
            &[0x99, 0x00],
            &[0x99, 0x00, 0x10, 0x04],
            &[0xC6, 0xFF],
        ] {
            assert!(primary_fingerprints(data).is_err(), "{data:?}");
        }
    }

    #[test]
    fn a_version_3_key_is_refused() {
        let mut block = vec![0x98, 17, 3];
        block.extend([0u8; 16]);
        assert_eq!(
            primary_fingerprints(&block),
            Err(KeyError::UnsupportedVersion(3))
        );
    }
}
