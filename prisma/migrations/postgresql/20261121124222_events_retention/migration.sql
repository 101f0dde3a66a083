-- AlterTable
ALTER TABLE "Account" ADD COLUMN     "eventsPrunedThrough" BIGINT NOT NULL DEFAULT 0;
