/** The operations of a catalog collection's routes: the same eleven for every collection (count, list, cursor, get, create...). */
import type { CollectionDef, DomainDef } from "../../catalog";
import type { RouteDef } from "../routes";
import { json, OPENAPI_MAX_BULK, ref, type Schema, schemaName } from "./common";
import { REVEALED_ON_CREATE, viewOf } from "./fields";
import { CURSOR_FRAMES, envelope, ETAG_HEADER, genericOp, ok, type OpParts, tagged } from "./op-parts";

export function collectionOp(r: RouteDef, d: DomainDef, c: CollectionDef): OpParts {
	const name = schemaName(d, c);
	const doc = viewOf(name);
	const created = REVEALED_ON_CREATE[`${d.name}/${c.name}`] ? viewOf(name, `${name}Created`) : doc;
	const body = (schema: Schema, description: string): Schema => ({ required: true, description, content: json(schema) });
	const readParams = ["query", "pagination", "projection", "populate", "zone", "xZone", "xExcludeSoftDelete"];
	const base = [400, 401, 403, 502];
	const writeRefused = c.platformWritten ? [405] : [];
	switch (r.op) {
		case "count":
			return { parameters: [...readParams, "xSagaSession"], responses: ok("Number of matching documents", envelope.total()), errors: base };
		case "list":
			return { parameters: [...readParams, "xSagaSession"], responses: ok("A page of documents and the total of matches", envelope.items(doc)), errors: base };
		case "cursor":
			return {
				parameters: [...readParams, "live", "last_event_id", "lastEventId"],
				responses: { "200": { description: CURSOR_FRAMES, content: { "text/event-stream": { schema: { type: "string", description: CURSOR_FRAMES } } } } },
				errors: base,
			};
		case "get":
			return {
				parameters: ["id", "ref", "projection", "populate", "zone", "xZone", "xExcludeSoftDelete", "xSagaSession", "ifNoneMatch"],
				responses: {
					...tagged("The document (with `populate`, a weak `ETag`)", envelope.data(doc)),
					"304": { description: "`If-None-Match` names the current tag: not modified, no body", headers: ETAG_HEADER },
				},
				errors: [...base, 404],
			};
		case "create":
			return {
				parameters: ["xSagaSession"],
				requestBody: body(ref("schemas", `${name}Create`), "The new document, without platform-managed fields"),
				responses: ok("The created document", envelope.data(created)),
				errors: [...base, 409, 413, ...writeRefused],
			};
		case "bulkCreate":
			return {
				parameters: ["xSagaSession"],
				requestBody: body(
					{
						type: "object",
						required: ["items"],
						additionalProperties: false,
						properties: { items: { type: "array", items: ref("schemas", `${name}Create`), minItems: 1, maxItems: OPENAPI_MAX_BULK } },
					},
					`Up to ${OPENAPI_MAX_BULK} new documents, created together or not at all`,
				),
				responses: ok("The created documents", envelope.items(created)),
				errors: [...base, 409, 413, ...writeRefused],
			};
		case "patch":
			return {
				parameters: ["id", "zone", "xZone", "xExcludeSoftDelete", "xSagaSession", "ifMatch"],
				requestBody: body(ref("schemas", `${name}Patch`), "Only the fields to change"),
				responses: tagged("The document with the updated fields", envelope.data(doc)),
				errors: [...base, 404, 409, 412, 413, ...writeRefused],
			};
		case "bulkPatch":
			return {
				description: "The filter comes from the query parameters, the fields to set from the body (`ref` cannot be set here: it is unique).",
				parameters: ["query", "zone", "xZone", "xExcludeSoftDelete", "xSagaSession"],
				requestBody: body(ref("schemas", `${name}Patch`), "Fields to set on every matching document"),
				responses: ok("Number of updated documents", envelope.total()),
				errors: [...base, 409, 413, ...writeRefused],
			};
		case "remove":
			return {
				parameters: ["id", "zone", "xZone", "xExcludeSoftDelete", "xSagaSession", "ifMatch"],
				responses: tagged("The soft-deleted document, `deleted_at` set (its `ETag`: the one a restore's `If-Match` takes)", envelope.data(doc)),
				errors: [...base, 404, 409, 412],
			};
		case "restore":
			return {
				parameters: ["id", "zone", "xZone", "xSagaSession", "ifMatch"],
				responses: tagged("The restored document, `deleted_at` cleared", envelope.data(doc)),
				errors: [...base, 404, 409, 412],
			};
		case "destroy":
			return {
				description: "Irreversible; applies to live and soft-deleted documents.",
				parameters: ["id", "zone", "xZone", "xSagaSession", "ifMatch"],
				responses: ok("The document as it was before its permanent removal", envelope.data(doc)),
				errors: [...base, 404, 409, 412],
			};
		default:
			return genericOp(r);
	}
}
