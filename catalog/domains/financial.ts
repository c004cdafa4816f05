import type { DomainDef } from "../types";

export const financial: DomainDef = {
	name: "financial",
	restPort: 3060,
	grpcPort: 5060,
	description: "Accounts, wallets, invoices, transactions and currencies",
	collections: [
		{
			name: "accounts",
			description: "Financial accounts",
			fields: { name: { type: "string", required: true, maxLength: 200 }, type: { type: "string", maxLength: 50 }, currency: { type: "string", maxLength: 10 } },
		},
		{
			name: "wallets",
			description: "Wallets (one is created for every new user)",
			fields: {
				user: { type: "string", format: "objectId", relation: "identity/users" },
				currency: { type: "string", maxLength: 10 },
				balance: { type: "number" },
			},
		},
		{
			name: "invoices",
			description: "Invoices",
			fields: {
				amount: { type: "number", required: true, minimum: 0 },
				currency: { type: "string", maxLength: 10 },
				status: { type: "string", enum: ["DRAFT", "ISSUED", "PAID", "CANCELLED"] },
				account: { type: "string", format: "objectId", relation: "financial/accounts" },
			},
			specials: [{ action: "payment", method: "POST", path: ":id/payment", description: "Pay an invoice" }],
		},
		{
			name: "transactions",
			description: "Transactions, each linked to a saga",
			fields: {
				amount: { type: "number", required: true },
				currency: { type: "string", maxLength: 10 },
				saga: { type: "string", required: true, format: "objectId", relation: "essential/sagas" },
				wallet: { type: "string", format: "objectId", relation: "financial/wallets" },
				status: { type: "string", enum: ["INIT", "VERIFIED", "FAILED"] },
			},
			specials: [
				{ action: "init", method: "POST", path: "init", description: "Initialise a transaction" },
				{ action: "verify", method: "POST", path: ":id/verify", description: "Verify a transaction" },
			],
		},
		{
			name: "currencies",
			description: "Currencies",
			fields: { code: { type: "string", required: true, maxLength: 10 }, name: { type: "string", maxLength: 100 }, symbol: { type: "string", maxLength: 10 } },
		},
	],
};
