//! Signing secrets, and how they are kept at rest.
//!
//! Each subscription has a [`SigningSecret`]: 32 random bytes, shown to its
//! owner once as `whsec_` + base64. The database keeps it only sealed
//! ([`SealedSecret`]): encrypted with AES-256-GCM-SIV under a
//! key-encryption key that the database does not hold, from a key file
//! ([`SealingKeys`]). A database read alone (a backup, a replica, an
//! injection) yields ciphertexts only.
//!
//! The key file has one key a line, `ID:BASE64` (a key id from 0 to 65535,
//! a colon, 32 bytes in standard base64); `#` starts a comment. The first
//! key seals, every key opens, so the key-encryption key is rotated by
//! putting a new key first and keeping the old one below it until every
//! secret has been sealed again.

use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use aws_lc_rs::aead::{AES_256_GCM_SIV, Aad, NONCE_LEN, Nonce, RandomizedNonceKey};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;

use crate::storage::webhooks::SealedSecret;

/// The length of a signing secret, in bytes (the Standard Webhooks spec
/// asks for 24 to 64).
pub const SECRET_LEN: usize = 32;

/// The prefix of a signing secret as its owner sees it.
const WHSEC_PREFIX: &str = "whsec_";

/// The length of a key-encryption key, in bytes (AES-256).
const KEY_LEN: usize = 32;

/// The length of AES-256-GCM-SIV's tag, in bytes.
const TAG_LEN: usize = 16;

/// The length of a key id in a sealed secret: big-endian `u16`.
const KEY_ID_LEN: usize = 2;

/// A sealed secret: key id ‖ nonce ‖ ciphertext ‖ tag.
const SEALED_LEN: usize = KEY_ID_LEN + NONCE_LEN + SECRET_LEN + TAG_LEN;

/// Authenticated with every sealed secret: a ciphertext of another
/// format, or made by another program under the same key, does not open
/// as one of ours.
const AAD: &[u8] = b"petstore-webhook-secret/v1";

/// A subscription's signing secret, in the clear. Its `Debug` does not
/// show it.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningSecret([u8; SECRET_LEN]);

impl SigningSecret {
    /// A new random secret.
    pub fn generate() -> Result<SigningSecret, getrandom::Error> {
        let mut bytes = [0; SECRET_LEN];
        getrandom::fill(&mut bytes)?;
        Ok(SigningSecret(bytes))
    }

    /// The secret as its owner is shown it: `whsec_` + standard base64.
    pub fn to_whsec(&self) -> String {
        format!("{WHSEC_PREFIX}{}", BASE64.encode(self.0))
    }

    /// The secret's bytes: the HMAC key of its signatures.
    pub fn as_bytes(&self) -> &[u8; SECRET_LEN] {
        &self.0
    }
}

impl fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SigningSecret(…)")
    }
}

/// One key-encryption key of the key file.
struct SealingKey {
    id: u16,
    /// Kept to write the file (`write_new`); never shown.
    bytes: [u8; KEY_LEN],
    aead: RandomizedNonceKey,
}

impl SealingKey {
    fn new(id: u16, bytes: [u8; KEY_LEN]) -> SealingKey {
        let aead = RandomizedNonceKey::new(&AES_256_GCM_SIV, &bytes)
            .expect("a 32-byte key is an AES-256 key");
        SealingKey { id, bytes, aead }
    }
}

/// The key-encryption keys of a key file: the first seals signing secrets,
/// every one opens them.
pub struct SealingKeys {
    /// Never empty.
    keys: Vec<SealingKey>,
}

impl fmt::Debug for SealingKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<u16> = self.keys.iter().map(|key| key.id).collect();
        f.debug_struct("SealingKeys").field("ids", &ids).finish()
    }
}

/// Why a key file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    /// The file cannot be read (or does not exist).
    #[error("cannot read the webhook key file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why not.
        #[source]
        source: io::Error,
    },
    /// The file cannot be written.
    #[error("cannot write the webhook key file {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why not.
        #[source]
        source: io::Error,
    },
    /// Users other than its owner may read or write the file.
    #[error(
        "the webhook key file {path} is open to its group or to others (mode {mode:03o}); \
         make it private: chmod 600 {path}"
    )]
    NotPrivate {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A line is not `ID:BASE64`.
    #[error(
        "the webhook key file {path}, line {line}: {reason} (expected ID:BASE64, a key id \
         from 0 to 65535 and 32 bytes in standard base64)"
    )]
    Malformed {
        /// The file.
        path: PathBuf,
        /// The line's number, from 1.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The file has no key (only comments, or nothing).
    #[error("the webhook key file {path} has no key")]
    NoKey {
        /// The file.
        path: PathBuf,
    },
    /// The operating system gave no random bytes for a new key.
    #[error("cannot make a webhook key: no random bytes from the operating system: {0}")]
    Random(getrandom::Error),
}

/// Why a secret cannot be sealed or opened.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    /// Sealing needs a random nonce, and none could be had.
    #[error("cannot seal a webhook secret: no random bytes from the operating system")]
    Random,
    /// The sealed secret is not of the length this version seals.
    #[error("a sealed webhook secret is {0} bytes, not {SEALED_LEN}: not sealed by this version")]
    Malformed(usize),
    /// The key that sealed it is not in the key file.
    #[error("a webhook secret is sealed under key {0}, which the webhook key file does not have")]
    UnknownKey(u16),
    /// It does not open under the key of its id.
    #[error(
        "a webhook secret does not open under key {0}: it was altered, or sealed under \
         another key file's key {0}"
    )]
    DoesNotOpen(u16),
}

impl SealingKeys {
    /// The keys of the key file at `path`, which only its owner may read
    /// (on Unix).
    pub fn load(path: &Path) -> Result<SealingKeys, KeyFileError> {
        let read_error = |source| KeyFileError::Read {
            path: path.to_owned(),
            source,
        };
        let mut file = File::open(path).map_err(read_error)?;
        // The open file's mode, not the path's: nothing can swap the file
        // between the check and the read.
        check_private(path, &file)?;
        let mut text = String::new();
        file.read_to_string(&mut text).map_err(read_error)?;
        let keys = parse(&text).map_err(|(line, reason)| KeyFileError::Malformed {
            path: path.to_owned(),
            line,
            reason,
        })?;
        if keys.is_empty() {
            return Err(KeyFileError::NoKey {
                path: path.to_owned(),
            });
        }
        Ok(SealingKeys { keys })
    }

    /// The keys of the key file at `path`, made (one new key, mode 0600)
    /// if there is no file there yet.
    pub fn load_or_create(path: &Path) -> Result<SealingKeys, KeyFileError> {
        match SealingKeys::load(path) {
            Err(KeyFileError::Read { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                let keys = SealingKeys::generate()?;
                match keys.write_new(path) {
                    Ok(()) => Ok(keys),
                    // Another process made it first: use its keys.
                    Err(KeyFileError::Write { source, .. })
                        if source.kind() == io::ErrorKind::AlreadyExists =>
                    {
                        SealingKeys::load(path)
                    }
                    Err(e) => Err(e),
                }
            }
            loaded => loaded,
        }
    }

    /// One new random key, with id 1.
    pub fn generate() -> Result<SealingKeys, KeyFileError> {
        let mut bytes = [0; KEY_LEN];
        getrandom::fill(&mut bytes).map_err(KeyFileError::Random)?;
        Ok(SealingKeys {
            keys: vec![SealingKey::new(1, bytes)],
        })
    }

    /// Writes the keys as a new key file at `path`, readable by its owner
    /// only; fails if a file is already there. Written whole or not at all:
    /// a temporary file beside it, moved into place only if `path` is
    /// still free (as `O_EXCL` would), so no reader ever sees half a key
    /// file and two processes never both make one.
    pub fn write_new(&self, path: &Path) -> Result<(), KeyFileError> {
        let write_error = |source| KeyFileError::Write {
            path: path.to_owned(),
            source,
        };
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        // tempfile creates its files with mode 0600.
        let mut file = tempfile::NamedTempFile::new_in(dir).map_err(write_error)?;
        file.write_all(self.file_contents().as_bytes())
            .map_err(write_error)?;
        file.as_file().sync_all().map_err(write_error)?;
        file.persist_noclobber(path)
            .map_err(|e| write_error(e.error))?;
        sync_dir(dir).map_err(write_error)
    }

    /// Seals `secret` under the first key.
    pub fn seal(&self, secret: &SigningSecret) -> Result<SealedSecret, SecretError> {
        let key = &self.keys[0];
        let mut in_out = secret.0.to_vec();
        let nonce = key
            .aead
            .seal_in_place_append_tag(Aad::from(AAD), &mut in_out)
            .map_err(|_| SecretError::Random)?;
        let mut sealed = Vec::with_capacity(SEALED_LEN);
        sealed.extend_from_slice(&key.id.to_be_bytes());
        sealed.extend_from_slice(nonce.as_ref());
        sealed.extend_from_slice(&in_out);
        Ok(SealedSecret(sealed))
    }

    /// Opens `sealed` with the key whose id it carries.
    pub fn open(&self, sealed: &SealedSecret) -> Result<SigningSecret, SecretError> {
        let bytes = &sealed.0;
        if bytes.len() != SEALED_LEN {
            return Err(SecretError::Malformed(bytes.len()));
        }
        let (id, rest) = bytes.split_at(KEY_ID_LEN);
        let (nonce, ciphertext) = rest.split_at(NONCE_LEN);
        let id = u16::from_be_bytes([id[0], id[1]]);
        let key = self
            .keys
            .iter()
            .find(|key| key.id == id)
            .ok_or(SecretError::UnknownKey(id))?;
        let nonce =
            Nonce::try_assume_unique_for_key(nonce).map_err(|_| SecretError::DoesNotOpen(id))?;
        let mut in_out = ciphertext.to_vec();
        let plain = key
            .aead
            .open_in_place(nonce, Aad::from(AAD), &mut in_out)
            .map_err(|_| SecretError::DoesNotOpen(id))?;
        let plain =
            <[u8; SECRET_LEN]>::try_from(&*plain).map_err(|_| SecretError::DoesNotOpen(id))?;
        Ok(SigningSecret(plain))
    }

    /// The keys as a key file.
    fn file_contents(&self) -> String {
        let mut text = String::from(
            "# petstore-server webhook key file: the keys that seal webhook signing secrets\n\
             # in the database. ID:BASE64, one a line; the first seals, every one opens.\n\
             # Keep it private, the same on every instance, and backed up apart from the\n\
             # database: without it the stored secrets cannot be opened.\n",
        );
        for key in &self.keys {
            text.push_str(&format!("{}:{}\n", key.id, BASE64.encode(key.bytes)));
        }
        text
    }
}

/// The keys of a key file's text, in order; or the number of the first
/// line that is not a key, a comment or blank, and why.
fn parse(text: &str) -> Result<Vec<SealingKey>, (usize, String)> {
    let mut keys: Vec<(usize, SealingKey)> = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let key = parse_line(line).map_err(|reason| (number, reason))?;
        if let Some((first, _)) = keys.iter().find(|(_, other)| other.id == key.id) {
            return Err((
                number,
                format!("key id {} is already on line {first}", key.id),
            ));
        }
        keys.push((number, key));
    }
    Ok(keys.into_iter().map(|(_, key)| key).collect())
}

/// One `ID:BASE64` line.
fn parse_line(line: &str) -> Result<SealingKey, String> {
    let (id, key) = line.split_once(':').ok_or_else(|| "no colon".to_owned())?;
    let id = id
        .trim()
        .parse::<u16>()
        .map_err(|_| format!("the key id {:?} is not a number from 0 to 65535", id.trim()))?;
    // The key itself is never repeated in a message.
    let bytes = BASE64
        .decode(key.trim())
        .ok()
        .and_then(|bytes| <[u8; KEY_LEN]>::try_from(bytes).ok())
        .ok_or_else(|| format!("the key of id {id} is not 32 bytes in standard base64"))?;
    Ok(SealingKey::new(id, bytes))
}

/// Refuses a key file that users other than its owner may read or write
/// (as ssh refuses a private key).
#[cfg(unix)]
fn check_private(path: &Path, file: &File) -> Result<(), KeyFileError> {
    use std::os::unix::fs::PermissionsExt;

    let metadata = file.metadata().map_err(|source| KeyFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(KeyFileError::NotPrivate {
            path: path.to_owned(),
            mode,
        });
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_path: &Path, _file: &File) -> Result<(), KeyFileError> {
    Ok(())
}

/// Makes a new directory entry durable: a key file lost in a crash after
/// secrets were sealed under it would lose them all.
#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    use std::os::unix::fs::PermissionsExt;

    /// A private key file with `text`, in a directory that lives as long as
    /// the returned guard.
    fn key_file(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("webhook-key");
        std::fs::write(&path, text).unwrap();
        #[cfg(unix)]
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        (dir, path)
    }

    fn line(id: u16, key: [u8; KEY_LEN]) -> String {
        format!("{id}:{}\n", BASE64.encode(key))
    }

    #[test]
    fn the_layout_s_lengths_are_aes_256_gcm_siv_s() {
        assert_eq!(AES_256_GCM_SIV.tag_len(), TAG_LEN);
        assert_eq!(AES_256_GCM_SIV.key_len(), KEY_LEN);
        assert_eq!(AES_256_GCM_SIV.nonce_len(), NONCE_LEN);
    }

    #[test]
    fn a_secret_is_32_random_bytes_shown_as_whsec_and_never_in_debug() {
        let secret = SigningSecret::generate().unwrap();
        let whsec = secret.to_whsec();
        let encoded = whsec.strip_prefix("whsec_").unwrap();
        assert_eq!(BASE64.decode(encoded).unwrap(), secret.as_bytes());
        assert_ne!(secret, SigningSecret::generate().unwrap());
        let debug = format!("{secret:?}");
        assert!(!debug.contains(encoded), "{debug}");
    }

    #[test]
    fn a_sealed_secret_opens_to_itself_and_hides_it() {
        let keys = SealingKeys::generate().unwrap();
        let secret = SigningSecret::generate().unwrap();
        let sealed = keys.seal(&secret).unwrap();
        assert_eq!(sealed.0.len(), SEALED_LEN);
        assert!(!sealed.0.windows(SECRET_LEN).any(|w| w == secret.as_bytes()));
        assert_eq!(keys.open(&sealed).unwrap(), secret);
        // A random nonce each time: the same secret seals differently.
        assert_ne!(keys.seal(&secret).unwrap(), sealed);
    }

    #[test]
    fn a_tampered_sealed_secret_does_not_open() {
        let keys = SealingKeys::generate().unwrap();
        let sealed = keys.seal(&SigningSecret::generate().unwrap()).unwrap();
        for at in KEY_ID_LEN..SEALED_LEN {
            let mut tampered = sealed.clone();
            tampered.0[at] ^= 1;
            assert_eq!(
                keys.open(&tampered),
                Err(SecretError::DoesNotOpen(1)),
                "byte {at}"
            );
        }
        let mut short = sealed.clone();
        short.0.pop();
        assert_eq!(
            keys.open(&short),
            Err(SecretError::Malformed(SEALED_LEN - 1))
        );
    }

    #[test]
    fn another_key_does_not_open_it() {
        let sealed = SealingKeys::generate()
            .unwrap()
            .seal(&SigningSecret::generate().unwrap())
            .unwrap();
        // Another key file's key 1.
        let other = SealingKeys::generate().unwrap();
        assert_eq!(other.open(&sealed), Err(SecretError::DoesNotOpen(1)));
        let error = other.open(&sealed).unwrap_err().to_string();
        assert!(error.contains("altered"), "{error}");
        // A key file without key 1.
        let (_dir, path) = key_file(&line(2, [7; KEY_LEN]));
        let without = SealingKeys::load(&path).unwrap();
        assert_eq!(without.open(&sealed), Err(SecretError::UnknownKey(1)));
    }

    /// Rotating the key-encryption key: a new key first, the old one kept
    /// below it. New secrets are sealed under the new one; the old ones
    /// still open.
    #[test]
    fn the_second_key_of_a_file_opens_what_it_sealed_when_it_was_first() {
        let (old, new) = ([1; KEY_LEN], [2; KEY_LEN]);
        let (_dir, before) = key_file(&line(1, old));
        let secret = SigningSecret::generate().unwrap();
        let sealed_before = SealingKeys::load(&before).unwrap().seal(&secret).unwrap();

        let text = format!("# rotated\n{}\n{}", line(2, new), line(1, old));
        let (_dir, after) = key_file(&text);
        let rotated = SealingKeys::load(&after).unwrap();
        assert_eq!(rotated.open(&sealed_before).unwrap(), secret);
        let sealed_after = rotated.seal(&secret).unwrap();
        assert_eq!(sealed_after.0[..KEY_ID_LEN], 2u16.to_be_bytes());
        assert_eq!(rotated.open(&sealed_after).unwrap(), secret);
    }

    #[test]
    fn a_missing_file_is_created_private_once_and_then_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pets.db.webhook-key");
        let created = SealingKeys::load_or_create(&path).unwrap();
        #[cfg(unix)]
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let loaded = SealingKeys::load_or_create(&path).unwrap();
        let secret = SigningSecret::generate().unwrap();
        assert_eq!(
            loaded.open(&created.seal(&secret).unwrap()).unwrap(),
            secret
        );
        // Only the key file itself: no temporary file left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

        let error = created.write_new(&path).unwrap_err();
        assert!(
            matches!(&error, KeyFileError::Write { source, .. } if source.kind() == io::ErrorKind::AlreadyExists),
            "{error}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_key_file_others_may_read_is_refused() {
        let (_dir, path) = key_file(&line(1, [1; KEY_LEN]));
        for mode in [0o640, 0o604, 0o620, 0o644] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let error = SealingKeys::load(&path).unwrap_err();
            assert!(
                matches!(error, KeyFileError::NotPrivate { mode: m, .. } if m == mode),
                "{error}"
            );
            assert!(error.to_string().contains("chmod 600"), "{error}");
            // load_or_create does not replace a file it may not use.
            assert!(SealingKeys::load_or_create(&path).is_err());
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
        assert!(SealingKeys::load(&path).is_ok());
    }

    #[test]
    fn a_malformed_line_is_refused_with_its_number() {
        let good = line(1, [1; KEY_LEN]);
        let short = BASE64.encode([1; 31]);
        let cases = [
            (format!("# keys\n\n{good}no colon here\n"), 4, "no colon"),
            (
                format!("{good}x:{}\n", BASE64.encode([1; 32])),
                2,
                "not a number",
            ),
            (
                format!("70000:{}\n", BASE64.encode([1; 32])),
                1,
                "not a number",
            ),
            (format!("#\n2:{short}\n"), 2, "not 32 bytes"),
            ("3:not base64!\n".to_owned(), 1, "not 32 bytes"),
            (format!("{good}{good}"), 2, "already on line 1"),
        ];
        for (text, number, reason) in cases {
            let (_dir, path) = key_file(&text);
            let error = SealingKeys::load(&path).unwrap_err();
            assert!(
                matches!(&error, KeyFileError::Malformed { line, .. } if *line == number),
                "{text:?}: {error}"
            );
            let message = error.to_string();
            assert!(message.contains(reason), "{message}");
            assert!(
                !message.contains(&short),
                "the key is not repeated: {message}"
            );
        }
        let (_dir, path) = key_file("# nothing yet\n\n");
        assert!(matches!(
            SealingKeys::load(&path),
            Err(KeyFileError::NoKey { .. })
        ));
    }

    #[test]
    fn a_written_key_file_reads_back_as_the_same_keys() {
        let keys = SealingKeys::generate().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        keys.write_new(&path).unwrap();
        let read = SealingKeys::load(&path).unwrap();
        assert_eq!(format!("{read:?}"), "SealingKeys { ids: [1] }");
        let secret = SigningSecret::generate().unwrap();
        assert_eq!(read.open(&keys.seal(&secret).unwrap()).unwrap(), secret);
    }
}
