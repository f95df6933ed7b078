//! Closed choices of the configuration (`log.format`, `kube.podInformer.mode`, ...): enums with
//! one canonical spelling each, read in any case from the file and from flags alike.

/// A value that is none of a closed choice's names.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not one of {expected}")]
pub struct ChoiceError {
    /// The value as given.
    pub value: String,
    /// The accepted names, comma-separated.
    pub expected: String,
}

/// The choice among `all` whose name is `text`, ignoring case and surrounding spaces.
pub fn find<T: Copy>(text: &str, all: &[T], name: fn(T) -> &'static str) -> Result<T, ChoiceError> {
    let wanted = text.trim();
    all.iter()
        .copied()
        .find(|&c| name(c).eq_ignore_ascii_case(wanted))
        .ok_or_else(|| ChoiceError {
            value: text.to_string(),
            expected: all.iter().map(|&c| name(c)).collect::<Vec<_>>().join(", "),
        })
}

/// Declares an enum of named choices with `ALL`, `as_str`, `Display`, a case-insensitive
/// `FromStr` (so clap can parse flags with it) and a `Deserialize` that goes through `FromStr`.
macro_rules! closed_choice {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl $name {
            /// Every choice, in the order messages list them.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The spelling used in configuration and documentation.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::config::ChoiceError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $crate::config::choice::find(s, Self::ALL, $name::as_str)
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = <String as ::serde::Deserialize>::deserialize(d)?;
                text.parse().map_err(::serde::de::Error::custom)
            }
        }
    };
}

pub(crate) use closed_choice;

#[cfg(test)]
mod tests {
    closed_choice! {
        /// A choice for the test.
        #[derive(Default)]
        enum Colour {
            #[default]
            Red = "red",
            DeepBlue = "DeepBlue",
        }
    }

    #[test]
    fn names_match_in_any_case_and_errors_list_the_choices() {
        for (text, expected) in [
            ("red", Colour::Red),
            ("RED", Colour::Red),
            (" Red ", Colour::Red),
            ("deepblue", Colour::DeepBlue),
            ("DeepBlue", Colour::DeepBlue),
        ] {
            assert_eq!(text.parse::<Colour>(), Ok(expected), "{text}");
            let via_yaml: Colour = serde_yaml::from_str(text).unwrap();
            assert_eq!(via_yaml, expected, "{text}");
        }
        assert_eq!(Colour::default(), Colour::Red);
        assert_eq!(Colour::DeepBlue.to_string(), "DeepBlue");
        let err = "green".parse::<Colour>().unwrap_err();
        assert_eq!(err.to_string(), "\"green\" is not one of red, DeepBlue");
        assert!(serde_yaml::from_str::<Colour>("[red]").is_err());
    }
}
