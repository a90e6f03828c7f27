//! Enums of an option's values, spelled as on the command line.

/// Declares an enum whose variants are the values of an option, with `VALUES` (the spellings,
/// in declaration order), `as_str`, and `FromStr` (aliases after `|`; any other string fails
/// with `expected one of: ` and the values). The layer that uses the option owns its enum; the
/// command line only parses into it.
macro_rules! option_values {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $(
                $(#[$vmeta:meta])*
                $variant:ident = $text:literal $(| $alias:literal)*
            ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        $vis enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// The option's values, as spelled on the command line.
            pub const VALUES: &'static [&'static str] = &[$($text),+];

            /// The option value naming this variant.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text $(| $alias)* => Ok($name::$variant),)+
                    _ => Err(format!("expected one of: {}", $name::VALUES.join(", "))),
                }
            }
        }
    };
}

pub(crate) use option_values;
