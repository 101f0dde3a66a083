-- AlterTable
ALTER TABLE "Instance" ADD COLUMN     "operationOwner" TEXT;
