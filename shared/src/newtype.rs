//! The text side of the validated string newtypes (`struct UserName(String)` and the like):
//! one macro instead of a hand-written `Display`, `Serialize` and `Deserialize` per type.

/// For each `Type(String)` given, with its parser (`FromStr` when none is named):
/// `Display` writes the text as it is, `Serialize` writes it as a JSON string, and
/// `Deserialize` reads a string and runs the parser, so a value read from a file or the bus is
/// validated exactly as one parsed from a command line.
///
/// ```ignore
/// enginekit_shared::string_newtype!(UserName, AbsPath);
/// enginekit_shared::string_newtype!(EngineId => EngineId::parse);
/// ```
#[macro_export]
macro_rules! string_newtype {
    ($ty:ty => $parse:expr) => {
        impl ::std::fmt::Display for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl $crate::__serde::Serialize for $ty {
            fn serialize<S: $crate::__serde::Serializer>(
                &self,
                serializer: S,
            ) -> ::std::result::Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }
        impl<'de> $crate::__serde::Deserialize<'de> for $ty {
            fn deserialize<D: $crate::__serde::Deserializer<'de>>(
                deserializer: D,
            ) -> ::std::result::Result<Self, D::Error> {
                let text = <::std::borrow::Cow<'de, str> as $crate::__serde::Deserialize>::deserialize(
                    deserializer,
                )?;
                $parse(&text).map_err(<D::Error as $crate::__serde::de::Error>::custom)
            }
        }
    };
    ($($ty:ty),+ $(,)?) => {
        $($crate::string_newtype!($ty => <$ty as ::std::str::FromStr>::from_str);)+
    };
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    #[derive(Debug, PartialEq)]
    struct Word(String);

    impl FromStr for Word {
        type Err = &'static str;
        fn from_str(s: &str) -> Result<Self, Self::Err> {
            if !s.is_empty() && s.bytes().all(|b| b.is_ascii_lowercase()) {
                Ok(Word(s.to_owned()))
            } else {
                Err("not a lowercase word")
            }
        }
    }

    crate::string_newtype!(Word);

    #[test]
    fn text_in_text_out_and_validated_when_read() {
        let word: Word = serde_json::from_str("\"abc\"").unwrap();
        assert_eq!(word.to_string(), "abc");
        assert_eq!(serde_json::to_string(&word).unwrap(), "\"abc\"");
        let err = serde_json::from_str::<Word>("\"ABC\"").unwrap_err();
        assert!(err.to_string().contains("not a lowercase word"), "{err}");
        assert!(serde_json::from_str::<Word>("1").is_err());
    }
}
