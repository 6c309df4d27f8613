package main

import (
	"bytes"
	"encoding/json"
	"fmt"

	yaml "go.yaml.in/yaml/v2"
)

// orderedYAML marshals v as a YAML document whose keys come in the order of its JSON
// encoding (the fields' order), as -o json prints them, rather than sorted: the two outputs
// of one status read alike.
func orderedYAML(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	ordered, err := decodeOrdered(dec)
	if err != nil {
		return nil, fmt.Errorf("yaml output: %w", err)
	}
	return yaml.Marshal(ordered)
}

// decodeOrdered decodes the next JSON value of dec, objects as yaml.MapSlice in their order.
func decodeOrdered(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '{' {
			var m yaml.MapSlice
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := decodeOrdered(dec)
				if err != nil {
					return nil, err
				}
				m = append(m, yaml.MapItem{Key: k, Value: v})
			}
			_, err := dec.Token() // '}'
			return m, err
		}
		a := []any{}
		for dec.More() {
			v, err := decodeOrdered(dec)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := dec.Token() // ']'
		return a, err
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i, nil
		}
		return t.Float64()
	}
	return tok, nil
}
