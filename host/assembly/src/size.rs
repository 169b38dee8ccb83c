//! Sizes as operators write them: `512M`, `20G`, `1.5T` (binary units) or a byte count.

/// `512M`, `20G`, `1.5T` (binary units) or a plain byte count.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, unit) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => t.split_at(i),
        None => (t, ""),
    };
    let shift = match unit.to_ascii_uppercase().trim_end_matches(['B', 'I']) {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(format!("`{s}`: the unit must be K, M, G or T")),
    };
    let n: f64 = num.trim().parse().map_err(|_| format!("`{s}` is not a size such as 512M or 20G"))?;
    if !n.is_finite() || n < 0.0 || n * (1u64 << shift) as f64 >= u64::MAX as f64 {
        return Err(format!("`{s}` is out of range"));
    }
    Ok((n * (1u64 << shift) as f64) as u64)
}

/// A size field as bytes or as text with a binary unit (`"20G"`), for serde's `with`.
pub(crate) mod bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(*v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Size {
            Bytes(u64),
            Text(String),
        }
        match Size::deserialize(d)? {
            Size::Bytes(n) => Ok(n),
            Size::Text(t) => super::parse_size(&t).map_err(serde::de::Error::custom),
        }
    }
}

/// An optional [`bytes`].
pub(crate) mod bytes_opt {
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.serialize_u64(*v),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        super::bytes::deserialize(d).map(Some)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_parse_in_binary_units() {
        use super::parse_size;
        assert_eq!(parse_size("20G"), Ok(20 << 30));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("1.5k"), Ok(1536));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("12Q").unwrap_err().contains("unit"));
        assert!(parse_size("-1G").is_err() && parse_size("G").is_err() && parse_size("99999999T").is_err());
    }
}
