/** The operations of special actions: body and answer from their catalog entry (SpecialDef). */
import type { FieldDef } from "../../catalog";
import type { RouteDef } from "../routes";
import { json, pascal, type Schema, schemaName } from "./common";
import { fieldSchema, viewOf } from "./fields";
import { envelope, ok, type OpParts } from "./op-parts";

/** A special action: body and answer from its catalog entry (SpecialDef `body`, `answer`, `errors`). */
export function specialOp(r: RouteDef): OpParts {
	const s = r.special!;
	const d = r.domain!;
	const c = r.collection!;
	const objectOf = (fields: Record<string, FieldDef>): Schema => ({
		type: "object",
		properties: Object.fromEntries(Object.entries(fields).map(([k, def]) => [k, fieldSchema(def, new Map(), { mode: "doc" })])),
	});
	const [kind, target] = (s.answer ?? "").split(":");
	let item: Schema | undefined;
	if (target === "object") item = objectOf(s.answerFields ?? {});
	else if (target) {
		const [svc, col] = target.split("/");
		const other = d.name === svc ? d.collections.find((x) => x.name === col) : undefined;
		item = viewOf(other ? schemaName(d, other) : pascal(`${svc} ${col}`));
	} else if (kind) item = viewOf(schemaName(d, c));
	if (item && target !== "object" && s.answerFields) item = { allOf: [item, objectOf(s.answerFields)] };
	// `page`: newest first, a page at a time; `next` is the `before` of the next page, null at the end.
	const page = (s: Schema): Schema => ({
		type: "object",
		required: ["items", "next"],
		properties: { items: { type: "array", items: s }, next: { type: ["string", "null"], description: "The `before` of the next page (null: no more)" } },
	});
	const answer: Schema = !item
		? {}
		: kind === "items"
			? envelope.items(item)
			: kind === "page"
				? page(item)
				: kind === "data-items"
					? envelope.data(envelope.items(item))
					: envelope.data(item);
	let requestBody: Schema | undefined;
	if (s.body) {
		const properties: Record<string, Schema> = {};
		for (const [k, def] of Object.entries(s.body)) properties[k] = fieldSchema(def, new Map(), { mode: "write" });
		const required = Object.entries(s.body)
			.filter(([, f]) => f.required)
			.map(([k]) => k);
		requestBody = { required: true, content: json({ type: "object", additionalProperties: false, properties, ...(required.length ? { required } : {}) }) };
	}
	const inline = Object.entries(s.query ?? {}).map(([name, def]) => ({
		name,
		in: "query",
		required: !!def.required,
		...(def.description ? { description: def.description } : {}),
		schema: fieldSchema({ ...def, description: undefined }, new Map(), { mode: "write" }),
	}));
	if (s.multipart && requestBody) {
		const form = (requestBody.content as Record<string, Schema>)["application/json"].schema as Schema;
		const properties = { file: { type: "array", items: { type: "string", format: "binary" }, description: "File content (repeatable)" }, ...(form.properties as Schema) };
		requestBody = { required: true, content: { "multipart/form-data": { schema: { type: "object", required: ["file"], properties } } } };
	}
	return {
		description: `Special action \`${s.action}\`.`,
		// A special addressed by id honours If-Match on its document.
		// By id, the caller's view of the document (its zone) counts, as for GET (authority/authority.ts callerView).
		parameters: [
			...new Set([
				...(r.path.includes("/:id") ? ["id", "ifMatch", "zone", "xZone"] : []),
				...(s.listParams ? ["query", ...(s.method === "GET" ? ["pagination"] : []), "zone", "xZone"] : []),
			]),
		],
		inlineParameters: inline,
		requestBody,
		responses: ok(s.description, answer),
		errors: [400, 401, 403, ...(s.errors ?? []), ...(r.path.includes("/:id") ? [412] : []), ...(requestBody ? [413] : [])],
	};
}
