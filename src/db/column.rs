//! One column of the key table as the catalog describes it.

/// One column as the catalog describes it.
#[derive(Clone, Debug)]
pub struct Column {
    pub name: String,
    /// The type as declared, with its modifier (`character varying(255)`), for messages.
    pub sql_type: String,
    /// The type without modifier (a domain's base type): what roles are matched against, so a
    /// modifier is accepted wherever its base type is.
    pub base_type: String,
    /// Its values come from a sequence (serial, bigserial, identity): they follow insertion.
    pub serial: bool,
    /// The values of an enum type (or a domain over one), in order; None for any other type.
    pub enum_labels: Option<Vec<String>>,
    /// The column is NOT NULL.
    pub not_null: bool,
}

impl Column {
    /// A column of type `ty` with no modifier (tests, and shapes written by hand).
    pub fn new(name: &str, ty: &str) -> Column {
        Column {
            name: name.to_owned(),
            sql_type: ty.to_owned(),
            base_type: ty.to_owned(),
            serial: false,
            enum_labels: None,
            not_null: false,
        }
    }

    /// The type a bound text value is cast to for comparison with this column: the base type
    /// (an unbounded varchar compares as the column does, where varchar(n) would truncate), with
    /// `character` written `bpchar` (bare `character` is character(1)).
    pub fn cast_type(&self) -> String {
        match self.base_type.as_str() {
            "character" => "bpchar".to_owned(),
            t => t.to_owned(),
        }
    }
}
