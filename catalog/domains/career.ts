import type { DomainDef } from "../types";

const named = { name: { type: "string", required: true, maxLength: 200 } } as const;

export const career: DomainDef = {
	name: "career",
	restPort: 3140,
	grpcPort: 5140,
	description: "Businesses, branches, staff, products and stores",
	collections: [
		{ name: "businesses", description: "Businesses", fields: { ...named } },
		{ name: "branches", description: "Branches", fields: { ...named, business: { type: "string", format: "objectId", relation: "career/businesses" } } },
		{ name: "employees", description: "Employees", fields: { ...named, branch: { type: "string", format: "objectId", relation: "career/branches" } } },
		{
			name: "products",
			description: "Products",
			fields: { ...named, price: { type: "number", minimum: 0 } },
			specials: [
				{
					action: "search",
					method: "GET",
					path: "search",
					implemented: true,
					description:
						"Search products: the caller's view (zones, grant rows and fields, `query`), ranked by relevance of `q` to the text fields the caller may read (whole words; the last word also as a prefix), best first, each with its `score`",
					query: { q: { type: "string", required: true, maxLength: 200, description: "The text to search for" } },
					listParams: true,
					answer: "items",
					answerFields: { score: { type: "number", description: "Relevance (BM25); higher is better" } },
				},
			],
		},
		{ name: "services", description: "Services offered", fields: { ...named, price: { type: "number", minimum: 0 } } },
		{
			name: "stocks",
			description: "Stock levels",
			fields: {
				product: { type: "string", required: true, format: "objectId", relation: "career/products" },
				quantity: { type: "integer" },
				store: { type: "string", format: "objectId", relation: "career/stores" },
			},
		},
		{ name: "stores", description: "Stores", fields: { ...named, branch: { type: "string", format: "objectId", relation: "career/branches" } } },
		{ name: "customers", description: "Customers", fields: { ...named, email: { type: "string", format: "email" } } },
	],
};
