/** financial: the standard collection pattern on every collection of the domain (catalog/domains/financial.ts). */
import type { ServiceSchema } from "moleculer";
import { financial } from "../catalog/domains/financial";
import { collectionMixin } from "../mixins/collection.mixin";

const FinancialService: ServiceSchema = { name: "financial", mixins: [collectionMixin(financial)] };

export default FinancialService;
