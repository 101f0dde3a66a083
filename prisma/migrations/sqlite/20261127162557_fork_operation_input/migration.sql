-- AlterTable
ALTER TABLE "Instance" ADD COLUMN "operationInput" JSONB;
