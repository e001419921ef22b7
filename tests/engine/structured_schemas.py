"""Twenty JSON schemas of the kinds clients send (nested objects, arrays, enums, bounded numbers, optional
fields, $ref, anyOf, const, patterns), each with a request a chat model can answer."""
from __future__ import annotations

import json

NAME = {"type": "string", "minLength": 1, "maxLength": 24}
SCHEMAS: list[tuple[str, dict]] = [
    ("a person", {"type": "object", "properties": {"name": NAME, "age": {"type": "integer", "minimum": 0,
                                                                        "maximum": 130}},
                  "required": ["name", "age"], "additionalProperties": False}),
    ("the capital of France", {"type": "object", "properties": {"country": NAME, "capital": NAME},
                               "required": ["country", "capital"]}),
    ("a yes or no answer to: is the sky blue?", {"type": "object", "properties": {"answer": {"type": "boolean"}},
                                                 "required": ["answer"], "additionalProperties": False}),
    ("three colors", {"type": "object", "properties": {"colors": {"type": "array", "items": NAME, "minItems": 3,
                                                                 "maxItems": 3}},
                      "required": ["colors"], "additionalProperties": False}),
    ("the sentiment of 'I love this!'", {"type": "object", "properties": {"sentiment": {
        "enum": ["positive", "negative", "neutral"]}}, "required": ["sentiment"]}),
    ("a product with a price", {"type": "object", "properties": {"product": NAME, "price": {
        "type": "number", "minimum": 0, "maximum": 10000}}, "required": ["product", "price"],
        "additionalProperties": False}),
    ("a book", {"type": "object", "properties": {"title": NAME, "author": {"type": "object", "properties": {
        "first": NAME, "last": NAME}, "required": ["first", "last"], "additionalProperties": False},
        "year": {"type": "integer", "minimum": 1400, "maximum": 2030}},
        "required": ["title", "author", "year"], "additionalProperties": False}),
    ("a to-do list", {"type": "object", "properties": {"items": {"type": "array", "maxItems": 4, "items": {
        "type": "object", "properties": {"task": NAME, "done": {"type": "boolean"}}, "required": ["task", "done"],
        "additionalProperties": False}}}, "required": ["items"], "additionalProperties": False}),
    ("a point on a plane", {"$defs": {"coord": {"type": "integer", "minimum": -100, "maximum": 100}},
                            "type": "object", "properties": {"x": {"$ref": "#/$defs/coord"},
                                                             "y": {"$ref": "#/$defs/coord"}},
                            "required": ["x", "y"], "additionalProperties": False}),
    ("a rating from 1 to 5 of a film", {"type": "object", "properties": {"film": NAME, "stars": {
        "type": "integer", "minimum": 1, "maximum": 5}}, "required": ["film", "stars"]}),
    ("an email message", {"type": "object", "properties": {"to": NAME, "subject": NAME, "urgent": {
        "type": "boolean"}, "cc": {"type": "array", "items": NAME, "maxItems": 2}},
        "required": ["to", "subject"], "additionalProperties": False}),
    ("a weather report", {"type": "object", "properties": {"city": NAME, "temperature_c": {
        "type": "integer", "minimum": -60, "maximum": 60}, "sky": {"enum": ["sunny", "cloudy", "rainy"]}},
        "required": ["city", "temperature_c", "sky"], "additionalProperties": False}),
    ("a greeting", {"type": "object", "properties": {"kind": {"const": "greeting"}, "text": NAME},
                    "required": ["kind", "text"], "additionalProperties": False}),
    ("a shape, circle or square", {"anyOf": [
        {"type": "object", "properties": {"circle": {"type": "integer", "minimum": 1, "maximum": 99}},
         "required": ["circle"], "additionalProperties": False},
        {"type": "object", "properties": {"square": {"type": "integer", "minimum": 1, "maximum": 99}},
         "required": ["square"], "additionalProperties": False}]}),
    ("a US zip code", {"type": "object", "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                       "required": ["zip"], "additionalProperties": False}),
    ("a list of three small prime numbers", {"type": "array", "items": {"type": "integer", "minimum": 2,
                                                                         "maximum": 97},
                                             "minItems": 3, "maxItems": 3}),
    ("a team of two people", {"$defs": {"member": {"type": "object", "properties": {"name": NAME, "role": {
        "enum": ["lead", "dev", "qa"]}}, "required": ["name", "role"], "additionalProperties": False}},
        "type": "object", "properties": {"team": NAME, "members": {"type": "array", "items": {
            "$ref": "#/$defs/member"}, "minItems": 2, "maxItems": 2}},
        "required": ["team", "members"], "additionalProperties": False}),
    ("the answer to 6 times 7", {"type": "integer", "minimum": 0, "maximum": 1000}),
    ("a recipe name and its number of steps", {"type": "object", "properties": {"recipe": NAME, "steps": {
        "type": "integer", "minimum": 1, "maximum": 20}, "vegetarian": {"type": ["boolean", "null"]}},
        "required": ["recipe", "steps", "vegetarian"], "additionalProperties": False}),
    ("a city and its country code", {"type": "object", "properties": {"city": NAME, "code": {
        "type": "string", "pattern": "^[A-Z]{2}$"}, "population_millions": {"type": "number", "minimum": 0,
                                                                          "maximum": 50}},
        "required": ["city", "code"], "additionalProperties": False}),
]


def request_for(what: str, schema: dict) -> list[dict]:
    return [{"role": "user", "content": f"Reply with JSON only: {what}. The JSON schema: {json.dumps(schema)}"}]
