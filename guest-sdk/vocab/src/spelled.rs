//! Enums with one fixed text spelling each.

/// Declares an enum whose variants have one text spelling each, used by
/// configs, the store, JSON and the CLI alike: `ALL`, `as_str`, `FromStr`,
/// `Display` and serde all agree on it.
#[macro_export]
#[doc(hidden)]
macro_rules! spelled_enum {
    ($(#[$m:meta])* pub enum $name:ident { $($(#[$vm:meta])* $v:ident = $s:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        pub enum $name { $($(#[$vm])* #[serde(rename = $s)] $v),+ }
        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$v),+];
            /// The value's one spelling.
            pub fn as_str(self) -> &'static str { match self { $($name::$v => $s),+ } }
        }
        impl ::std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s { $($s => Ok($name::$v),)+ _ => Err(format!("{s:?} is not a valid {}", stringify!($name))) }
            }
        }
        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result { f.write_str(self.as_str()) }
        }
    };
}
