//! The stream key an operator gives producers and consumers of one
//! stream: 32 bytes, written as 64 hex digits (in a file, an option or the
//! `SPLITRT_VYS_KEY` environment variable). Generate one with
//! `head -c 32 /dev/urandom | xxd -p -c 64`.

/// Parse 64 hex digits (surrounding white space ignored).
///
/// ```
/// let k = splitrt_vys::stream_key::parse(&"ab".repeat(32)).unwrap();
/// assert_eq!(k, [0xab; 32]);
/// assert!(splitrt_vys::stream_key::parse("abc").is_err());
/// ```
pub fn parse(s: &str) -> Result<[u8; 32], String> {
    let s = s.trim();
    if s.len() != 64 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!(
            "a stream key is 64 hex digits, got {} characters",
            s.len()
        ));
    }
    let mut k = [0u8; 32];
    for (i, b) in k.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|e| e.to_string())?;
    }
    Ok(k)
}

/// The key from `--key-file` if given, else `$SPLITRT_VYS_KEY`.
pub fn from_file_or_env(file: Option<&std::path::Path>) -> Result<[u8; 32], String> {
    match file {
        Some(p) => {
            let s = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            parse(&s).map_err(|e| format!("{}: {e}", p.display()))
        }
        None => match std::env::var("SPLITRT_VYS_KEY") {
            Ok(s) => parse(&s).map_err(|e| format!("SPLITRT_VYS_KEY: {e}")),
            Err(_) => Err(
                "no stream key: give --key-file FILE or set SPLITRT_VYS_KEY \
                           (64 hex digits, the same for producers and consumers)"
                    .into(),
            ),
        },
    }
}
