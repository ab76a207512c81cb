package schema

import "github.com/zclconf/go-cty/cty"

// Constructors for the attribute types plugin settings use, so a plugin
// declares its schema without importing go-cty:
//
//	schema.Spec{Attributes: []schema.Attribute{
//		schema.StringList("words", "one task per word").WithDefault([]string{"hello"}),
//		schema.String("api_key", "the key").MarkRequired().MarkSensitive(),
//	}}
//
// Attribute.Type stays a cty.Type for the types these do not cover.

// String declares a string attribute.
func String(name, description string) Attribute { return attr(name, cty.String, description) }

// Number declares a number attribute (decodes into any Go number type).
func Number(name, description string) Attribute { return attr(name, cty.Number, description) }

// Bool declares a boolean attribute.
func Bool(name, description string) Attribute { return attr(name, cty.Bool, description) }

// StringList declares a list of strings.
func StringList(name, description string) Attribute {
	return attr(name, cty.List(cty.String), description)
}

// NumberList declares a list of numbers.
func NumberList(name, description string) Attribute {
	return attr(name, cty.List(cty.Number), description)
}

// StringMap declares a map of strings, e.g. environment variables.
func StringMap(name, description string) Attribute {
	return attr(name, cty.Map(cty.String), description)
}

// Any declares an attribute of any type (decodes into its JSON form).
func Any(name, description string) Attribute { return attr(name, cty.DynamicPseudoType, description) }

func attr(name string, t cty.Type, description string) Attribute {
	return Attribute{Name: name, Type: t, Description: description}
}

// WithDefault returns a with default v, a plain Go value of the attribute's
// type (it panics on a value JSON cannot encode, as DefaultJSON does).
func (a Attribute) WithDefault(v any) Attribute {
	a.Default = DefaultJSON(v)
	return a
}

// MarkRequired returns a, required.
func (a Attribute) MarkRequired() Attribute {
	a.Required = true
	return a
}

// MarkSensitive returns a with its value kept out of logs and listings.
func (a Attribute) MarkSensitive() Attribute {
	a.Sensitive = true
	return a
}

// SingleBlock declares a nested block that may appear at most once.
func SingleBlock(name, description string, spec Spec) Block {
	return Block{Name: name, Nesting: NestingSingle, Spec: spec, Description: description}
}

// ListBlock declares a nested block that may appear any number of times.
func ListBlock(name, description string, spec Spec) Block {
	return Block{Name: name, Nesting: NestingList, Spec: spec, Description: description}
}
