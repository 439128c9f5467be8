// The offline API page: renders the service's own /openapi.json (no CDN scripts).
"use strict";

function node(tag, text, cls) {
  const n = document.createElement(tag);
  if (text !== undefined) n.textContent = text;
  if (cls) n.className = cls;
  return n;
}

function typeOf(schema) {
  if (!schema) return "";
  if (schema.$ref) return schema.$ref.split("/").pop();
  if (schema.anyOf) return schema.anyOf.map(typeOf).join(" | ");
  if (schema.type === "array") return typeOf(schema.items) + "[]";
  return schema.type || "object";
}

async function main() {
  const box = document.getElementById("endpoints");
  const resp = await fetch("/openapi.json");
  const doc = await resp.json();
  box.replaceChildren();
  for (const [path, ops] of Object.entries(doc.paths || {})) {
    for (const [method, op] of Object.entries(ops)) {
      const sec = node("section", undefined, "endpoint");
      sec.append(node("h3", method.toUpperCase() + " " + path));
      if (op.summary) sec.append(node("p", op.summary));
      if (op.description) sec.append(node("p", op.description));
      const params = op.parameters || [];
      if (params.length) {
        const ul = node("ul");
        for (const p of params) ul.append(node("li", p.name + " (" + p.in + ", " + typeOf(p.schema) +
                                                (p.required ? ", required" : "") + ")"));
        sec.append(node("p", "parameters:"), ul);
      }
      const body = op.requestBody && op.requestBody.content && op.requestBody.content["application/json"];
      if (body) sec.append(node("p", "JSON body: " + typeOf(body.schema)));
      sec.append(node("p", "responses: " + Object.keys(op.responses || {}).join(", ")));
      box.append(sec);
    }
  }
  const schemas = document.getElementById("schemas");
  for (const [name, s] of Object.entries((doc.components || {}).schemas || {})) {
    const sec = node("section");
    sec.append(node("h3", name));
    const ul = node("ul");
    for (const [field, f] of Object.entries(s.properties || {})) {
      ul.append(node("li", field + ": " + typeOf(f) + ((s.required || []).includes(field) ? " (required)" : "")));
    }
    sec.append(ul);
    schemas.append(sec);
  }
}

main().catch(e => { document.getElementById("endpoints").textContent = "cannot load /openapi.json: " + e; });
