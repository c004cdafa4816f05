/** What every part of the OpenAPI document shares: the Schema type, `$ref` and JSON-content helpers, schema names. */
import type { CollectionDef, DomainDef } from "../../catalog";

export type Schema = Record<string, unknown>;

/**
 * Same value as MAX_BULK of the collection mixin. Not imported from there because the mixin pulls in the store
 * drivers, which a gateway-only node that just serves this document must not have to load (a unit test keeps
 * the two equal).
 */
export const OPENAPI_MAX_BULK = 1000;

export const ref = (kind: "schemas" | "parameters" | "responses", name: string): Schema => ({ $ref: `#/components/${kind}/${name}` });
export const json = (schema: Schema) => ({ "application/json": { schema } });
export const pascal = (s: string) =>
	s
		.split(/[^A-Za-z0-9]+/)
		.filter(Boolean)
		.map((p) => p[0].toUpperCase() + p.slice(1))
		.join("");

/** `<Domain><Collection>`, e.g. `EssentialSagaStages`: unique because `service/collection` is. */
export function schemaName(d: DomainDef, c: CollectionDef): string {
	return pascal(d.name) + pascal(c.name);
}

export const str = (description?: string): Schema => (description ? { type: "string", description } : { type: "string" });
export const strList = (description?: string): Schema => ({ type: "array", items: { type: "string" }, ...(description ? { description } : {}) });
