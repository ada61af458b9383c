package api

import (
	"strings"
	"testing"
)

// TestOpenAPIExamples: every operation shows an example of what it takes
// or answers (a request body's, or a response's, shared responses
// included), and every request body is a named schema. The validator
// that loads the description (openapicheck) checks each example against
// its schema.
func TestOpenAPIExamples(t *testing.T) {
	doc := description(t)
	hasExample := func(content any) bool {
		types, _ := content.(map[string]any)
		for _, mt := range types {
			m, _ := mt.(map[string]any)
			if m["example"] != nil || m["examples"] != nil {
				return true
			}
		}
		return false
	}
	paths, _ := doc["paths"].(map[string]any)
	for path, item := range paths {
		item, _ := item.(map[string]any)
		for _, m := range httpMethods {
			op, ok := item[m].(map[string]any)
			if !ok {
				continue
			}
			where := strings.ToUpper(m) + " " + path
			found := false
			if rb, ok := op["requestBody"].(map[string]any); ok {
				found = hasExample(rb["content"])
				types, _ := rb["content"].(map[string]any)
				for name, mt := range types {
					schema, _ := mt.(map[string]any)["schema"].(map[string]any)
					if ref, _ := schema["$ref"].(string); !strings.HasPrefix(ref, "#/components/schemas/") || strings.Count(ref, "/") != 3 {
						t.Errorf("%s: %s's %s request body is not a named schema: make it $ref: \"#/components/schemas/<Name>\"", specFile, where, name)
					}
				}
			}
			responses, _ := op["responses"].(map[string]any)
			for _, r := range responses {
				rm, _ := r.(map[string]any)
				if ref, ok := rm["$ref"].(string); ok {
					resolved, err := resolve(doc, ref)
					if err != nil {
						continue // reported by TestOpenAPIDocument
					}
					rm, _ = resolved.(map[string]any)
				}
				found = found || hasExample(rm["content"])
			}
			if !found {
				t.Errorf("%s: %s has no example: add one to its request body or its success response", specFile, where)
			}
		}
	}
}

// Every $ref names a whole component (#/components/<kind>/<Name>), never a
// part of one: generators refuse references into a schema's properties.
func TestOpenAPIRefsNameComponents(t *testing.T) {
	eachObject("", description(t), func(where string, v map[string]any) {
		if ref, ok := v["$ref"].(string); ok && (!strings.HasPrefix(ref, "#/components/") || strings.Count(ref, "/") != 3) {
			t.Errorf("%s: %s: $ref %q does not name a component: make what it points to a named one", specFile, where, ref)
		}
	})
}
