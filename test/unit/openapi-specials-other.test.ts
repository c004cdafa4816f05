/** Issue 12 item 4: search, collect, generate and resolve appear in the OpenAPI document with their parameters, bodies and answers. */
import { openApiDocument } from "../../lib/openapi";

const doc = openApiDocument() as any;
const answerOf = (op: any) => op.responses["200"].content["application/json"].schema;
/** A document in an answer: read in full (`<Name>Full`) or narrowed by a projection or a grant's field list. */
const view = (name: string) => ({ anyOf: [{ $ref: `#/components/schemas/${name}Full` }, { $ref: `#/components/schemas/${name}` }] });

describe("the other special actions in the OpenAPI document", () => {
	test.each([
		["/content/posts/search", "ContentPosts", "search:content:posts"],
		["/career/products/search", "CareerProducts", "search:career:products"],
		["/conjoint/messages/search", "ConjointMessages", "search:conjoint:messages"],
	])("GET %s: q (required, at most 200), the list's view parameters, { items, total } of documents with a score", (path, schema, scope) => {
		const op = doc.paths[path].get;
		expect(op.operationId).toBe(path.slice(1).replace(/\//g, "_"));
		expect(op.description).toContain(scope);
		expect(op.parameters).toEqual(
			expect.arrayContaining([
				{ name: "q", in: "query", required: true, description: "The text to search for", schema: { type: "string", maxLength: 200 } },
				{ $ref: "#/components/parameters/pagination" },
				{ $ref: "#/components/parameters/query" },
				{ $ref: "#/components/parameters/zone" },
			]),
		);
		const a = answerOf(op);
		expect(a.required).toEqual(["items", "total"]);
		expect(a.properties.items.items.allOf[0]).toEqual(view(schema));
		expect(a.properties.items.items.allOf[1].properties.score.type).toBe("number");
		expect(Object.keys(op.responses)).toEqual(expect.arrayContaining(["200", "400", "401", "403"]));
		// Routed before GET /{id}: the path exists on its own.
		expect(doc.paths[path.replace("search", "{id}")].get.operationId).not.toBe(op.operationId);
	});

	test("POST /special/stats/collect: body with period required, { items, total } of sums", () => {
		const op = doc.paths["/special/stats/collect"].post;
		expect(op.description).toContain("collect:special:stats");
		const body = op.requestBody.content["application/json"].schema;
		expect(body.required).toEqual(["period"]);
		expect(body.properties.period.enum).toEqual(["daily", "monthly", "yearly"]);
		expect(Object.keys(body.properties)).toEqual(["period", "service", "collection", "from", "to"]);
		const a = answerOf(op);
		expect(Object.keys(a.properties.items.items.properties)).toEqual(["service", "collection", "period", "from", "to", "created", "updated", "deleted", "restored"]);
	});

	test("POST /conjoint/accounts/generate: optional name, { data: account }, 404 and 409", () => {
		const op = doc.paths["/conjoint/accounts/generate"].post;
		expect(op.requestBody.content["application/json"].schema.properties.name).toMatchObject({ type: "string", maxLength: 200 });
		expect(answerOf(op).properties.data).toEqual(view("ConjointAccounts"));
		expect(Object.keys(op.responses)).toEqual(expect.arrayContaining(["404", "409"]));
	});

	test("POST /logistic/locations/resolve and /logistic/travels/resolve: bodies and answers", () => {
		const loc = doc.paths["/logistic/locations/resolve"].post;
		expect(Object.keys(loc.requestBody.content["application/json"].schema.properties)).toEqual(["lat", "lng", "query"]);
		expect(answerOf(loc).properties.data.allOf[0]).toEqual(view("LogisticLocations"));
		expect(Object.keys(answerOf(loc).properties.data.allOf[1].properties)).toEqual(["distance", "score"]);
		const tr = doc.paths["/logistic/travels/resolve"].post;
		expect(tr.requestBody.content["application/json"].schema.required).toEqual(["origin", "destination"]);
		expect(Object.keys(answerOf(tr).properties.data.properties)).toEqual(["distance", "duration", "path"]);
		expect(Object.keys(tr.responses)).toEqual(expect.arrayContaining(["400", "403", "404"]));
	});
});
