-- AlterTable
ALTER TABLE "Worker" ADD COLUMN "placeableUntil" DATETIME;
