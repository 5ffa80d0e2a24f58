"""Pipeline stages: plain functions over Arrow tables, no Ray and no file paths inside."""
